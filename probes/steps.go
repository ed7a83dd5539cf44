package probes

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// StepStats summarizes the engine steps of one window.
type StepStats struct {
	NSteps    int64 `json:"n_steps"`
	Malformed int64 `json:"malformed"`
	// FirstMalformed names the first malformed line (number and problem).
	FirstMalformed string `json:"first_malformed,omitempty"`
	// FirstTsUs and LastTsUs are the smallest and largest ts_us kept.
	FirstTsUs int64 `json:"first_ts_us,omitempty"`
	LastTsUs  int64 `json:"last_ts_us,omitempty"`
	// Timers holds one entry per timer present on at least one kept step,
	// keyed by TimerNames, over the steps of both paths. A timer never
	// measured is absent, not zero.
	Timers map[string]Quantiles `json:"timers"`
	// Paths splits Timers by the path of the step (StepPathStep,
	// StepPathBatchQueue): on the batch-queue path update_us, wait_us and
	// gpu_us belong to the batch collected in the step, schedule_us and
	// launch_us to the batch launched in it.
	Paths map[string]PathStats `json:"paths,omitempty"`
	// BatchQueueSteps counts kept lines written by step_with_batch_queue
	// (batch_queue:1): there launch_us and wait_us replace execute_us, and
	// update_us belongs to an earlier batch than the token counts.
	BatchQueueSteps int64 `json:"batch_queue_steps,omitempty"`
	// GPU says whether GPU time was measured (gpu_us), and how or why not.
	GPU GPUTiming `json:"gpu"`
	// Engines are the status lines, the last one per engine process; they
	// are kept whatever the window (they describe the engine, not a step).
	Engines []EngineStatus `json:"engines,omitempty"`
	// Incomplete lists "<hook>: <reason>" for each hook some engine could
	// not apply: its timer is absent and its time is in unaccounted_us.
	Incomplete []string `json:"incomplete,omitempty"`
	// Workers counts the worker get_finished lines merged into the log
	// before it was summarized (multiproc executor, TP > 1): matched or
	// not, every line is counted. Nil when there were no worker files.
	Workers *MergeStats `json:"workers,omitempty"`
}

// PathStats is the part of a summary that ran on one step path.
type PathStats struct {
	NSteps int64                `json:"n_steps"`
	Timers map[string]Quantiles `json:"timers"`
}

// stepSkip marks the fields SummarizeSteps does not read.
const stepSkip = ^uint32(0) &^ (1<<NumTimers - 1) &^ (1 << FieldBatchQueue) &^ (1 << FieldGPUHostBound)

// Path indexes of the per-path counters.
const (
	pathStep = iota
	pathBatchQueue
	numPaths
)

var pathNames = [numPaths]string{StepPathStep, StepPathBatchQueue}

const (
	readBufSize = 1 << 20
	maxLineSize = 64 << 20 // longer lines are counted malformed and skipped
	ctxEvery    = 1 << 16
)

// lineReader yields lines without their newline, reusing its buffers. A
// line longer than maxLineSize is returned with tooLong set and truncated.
type lineReader struct {
	br   *bufio.Reader
	long []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, readBufSize)}
}

// next returns the next line (valid until the following call) or io.EOF.
func (lr *lineReader) next() (line []byte, tooLong bool, err error) {
	b, err := lr.br.ReadSlice('\n')
	if err == nil {
		return b[:len(b)-1], false, nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if len(b) > 0 && errors.Is(err, io.EOF) {
			return b, false, nil
		}
		return nil, false, err
	}
	lr.long = append(lr.long[:0], b...)
	for {
		b, err = lr.br.ReadSlice('\n')
		if len(lr.long) < maxLineSize {
			lr.long = append(lr.long, b...)
		} else {
			tooLong = true
		}
		switch {
		case err == nil:
			l := lr.long
			if !tooLong {
				l = l[:len(l)-1]
			}
			return l, tooLong, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return lr.long, tooLong, nil
		default:
			return nil, false, err
		}
	}
}

// SummarizeSteps streams a step log from r — JSONL lines, the plugin's
// binary records (steps_binary.go), or both — and summarizes the steps
// with fromUs ≤ ts_us ≤ toUs (0 leaves that side unbounded). It never
// holds more than one record: memory is bounded whatever the length.
// Unknown fields are ignored; malformed lines and records (anywhere in the
// stream) are counted and skipped. Blank lines are skipped silently.
// Status lines are kept whatever their ts_us; a GPU line or record (gpu_us
// of a batch, written after its step) counts on the path of the step
// before it. If w is not nil, every kept record is copied to it as a JSONL
// line (text lines verbatim), newline-terminated.
func SummarizeSteps(ctx context.Context, r io.Reader, fromUs, toUs int64, w io.Writer) (StepStats, error) {
	var (
		st       StepStats
		tally    stepTally
		rec      StepRecord
		sp       = stepParser{skip: stepSkip} // only timers and the path are read
		out      stepCopy
		statuses statusSet
	)
	if w != nil {
		out.bw = bufio.NewWriterSize(w, 1<<16)
	}
	inWindow := func(ts int64) bool { return (fromUs == 0 || ts >= fromUs) && (toUs == 0 || ts <= toUs) }
	rr := newRecordReader(r)
	for lineNo := int64(1); ; lineNo++ {
		if lineNo%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return st, err
			}
		}
		kind, line, tooLong, err := rr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			if errors.Is(err, errMalformedRecord) {
				st.malformed(lineNo, err)
				continue
			}
			return st, fmt.Errorf("engine_step.jsonl: read after record %d: %w", lineNo-1, err)
		}
		if tooLong {
			st.malformed(lineNo, fmt.Errorf("line longer than %d bytes", maxLineSize))
			continue
		}
		var perr error
		switch kind {
		case kindText:
			if len(line) == 0 || (isWS(line[0]) && skipWS(line, 0) == len(line)) {
				continue
			}
			perr = sp.parse(line, &rec)
		case kindGPU:
			rr.recordOf(kind, &rec)
			perr = errNoStepDuration
		default:
			rr.recordOf(kind, &rec)
		}
		switch {
		case perr == nil:
		case !errors.Is(perr, errNoStepDuration):
			st.malformed(lineNo, perr)
			continue
		case kind == kindText && statuses.addLine(line): // kept whatever the window
			if err := out.write(kindText, line, nil); err != nil {
				return st, err
			}
			continue
		case !isGPURecord(&rec):
			st.malformed(lineNo, perr)
			continue
		}
		if !inWindow(rec.TsUs) {
			continue
		}
		if perr == nil {
			tally.addStep(&st, &rec)
		} else {
			tally.addGPU(&st, &rec)
		}
		if err := out.write(kind, line, &rec); err != nil {
			return st, err
		}
	}
	if err := out.flush(); err != nil {
		return st, err
	}
	tally.finish(&st)
	statuses.finish(&st)
	return st, nil
}

// isGPURecord says whether rec is a GPU line or record: gpu_us of a batch
// and nothing else but its batch, pid, path and host-bound mark.
func isGPURecord(rec *StepRecord) bool {
	const allowed = 1<<FieldGPU | 1<<FieldGPUBatch | 1<<FieldPID | 1<<FieldBatchQueue | 1<<FieldGPUHostBound
	return rec.Has&(1<<FieldGPU) != 0 && rec.Has&^allowed == 0
}

// stepTally accumulates the kept steps of a window by path.
type stepTally struct {
	timers [numPaths][NumTimers]counter
	nPath  [numPaths]int64
	// lastPath is the path of the last kept step, on which a later GPU
	// line counts.
	lastPath int
	// hostSpans: the host-bound GPU spans (FieldGPUHostBound), which are
	// upper bounds and never enter gpu_us.
	hostSpans counter
}

// addStep counts a kept step: its ts_us span, its path and its timers.
func (t *stepTally) addStep(st *StepStats, rec *StepRecord) {
	if st.NSteps == 0 || rec.TsUs < st.FirstTsUs {
		st.FirstTsUs = rec.TsUs
	}
	if rec.TsUs > st.LastTsUs {
		st.LastTsUs = rec.TsUs
	}
	st.NSteps++
	path := pathStep
	if v, ok := rec.Get(FieldBatchQueue); ok && v == 1 {
		st.BatchQueueSteps++
		path = pathBatchQueue
	}
	t.lastPath = path
	t.nPath[path]++
	h := rec.Has & (1<<NumTimers - 1)
	if rec.Has&(1<<FieldGPU) != 0 {
		if rec.Has&(1<<FieldGPUHostBound) != 0 {
			t.addHostSpan(st, rec.Values[FieldGPU])
			h &^= 1 << FieldGPU
		} else {
			st.GPU.Steps++
		}
	}
	tp := &t.timers[path]
	for ; h != 0; h &= h - 1 {
		i := bits.TrailingZeros32(h)
		tp[i].add(rec.Values[i])
	}
}

// addGPU counts a kept GPU line (gpu_us written after its step) on the
// path of the step before it.
func (t *stepTally) addGPU(st *StepStats, rec *StepRecord) {
	if rec.Has&(1<<FieldGPUHostBound) != 0 {
		t.addHostSpan(st, rec.Values[FieldGPU])
		return
	}
	t.timers[t.lastPath][FieldGPU].add(rec.Values[FieldGPU])
	st.GPU.Late++
}

// addHostSpan keeps a host-bound GPU span apart: an upper bound, not GPU
// time.
func (t *stepTally) addHostSpan(st *StepStats, us float64) {
	t.hostSpans.add(us)
	st.GPU.HostBound++
}

// finish writes the tallied timers, over both paths and per path, and the
// host-bound spans' median into st.
func (t *stepTally) finish(st *StepStats) {
	st.Timers = make(map[string]Quantiles)
	for i := range NumTimers {
		var cs []*counter
		for p := range numPaths {
			if t.timers[p][i].n > 0 {
				cs = append(cs, &t.timers[p][i])
			}
		}
		if len(cs) > 0 {
			st.Timers[TimerNames[i]] = mergedQuantiles(cs)
		}
	}
	for p := range numPaths {
		if t.nPath[p] == 0 && t.timers[p][FieldGPU].n == 0 {
			continue
		}
		ps := PathStats{NSteps: t.nPath[p], Timers: map[string]Quantiles{}}
		for i := range NumTimers {
			if t.timers[p][i].n > 0 {
				ps.Timers[TimerNames[i]] = t.timers[p][i].quantiles()
			}
		}
		if st.Paths == nil {
			st.Paths = map[string]PathStats{}
		}
		st.Paths[pathNames[p]] = ps
	}
	if t.hostSpans.n > 0 {
		st.GPU.HostBoundSpanP50 = t.hostSpans.quantiles().P50
	}
}

// stepCopy writes the kept records to SummarizeSteps' w as JSONL lines;
// without a w it writes nothing.
type stepCopy struct {
	bw  *bufio.Writer
	buf []byte // a binary record's text form
}

// write copies a kept line or record: a text line verbatim, a binary
// record (rec) in its JSONL form.
func (c *stepCopy) write(kind int, line []byte, rec *StepRecord) error {
	if c.bw == nil {
		return nil
	}
	if kind != kindText {
		c.buf = AppendStepJSON(c.buf[:0], rec)
		line = c.buf
	}
	c.bw.Write(line)
	return c.failed(c.bw.WriteByte('\n'))
}

func (c *stepCopy) flush() error {
	if c.bw == nil {
		return nil
	}
	return c.failed(c.bw.Flush())
}

func (c *stepCopy) failed(err error) error {
	if err != nil {
		return fmt.Errorf("copy of step lines: %w", err)
	}
	return nil
}

func (st *StepStats) malformed(lineNo int64, err error) {
	st.Malformed++
	if st.FirstMalformed == "" {
		st.FirstMalformed = fmt.Sprintf("line %d: %v", lineNo, err)
	}
}
