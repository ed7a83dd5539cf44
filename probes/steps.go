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
	// keyed by TimerNames. A timer never measured is absent, not zero.
	Timers map[string]Quantiles `json:"timers"`
	// BatchQueueSteps counts kept lines written by step_with_batch_queue
	// (batch_queue:1): there launch_us and wait_us replace execute_us, and
	// update_us belongs to an earlier batch than the token counts.
	BatchQueueSteps int64 `json:"batch_queue_steps,omitempty"`
	// Workers counts the worker get_finished lines merged into the log
	// before it was summarized (multiproc executor, TP > 1): matched or
	// not, every line is counted. Nil when there were no worker files.
	Workers *MergeStats `json:"workers,omitempty"`
}

// stepSkip marks the fields SummarizeSteps does not read.
const stepSkip = ^uint32(0) &^ (1<<NumTimers - 1) &^ (1 << FieldBatchQueue)

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

// SummarizeSteps streams an engine_step.jsonl log from r and summarizes the
// steps with fromUs ≤ ts_us ≤ toUs (0 leaves that side unbounded). It never
// holds more than one line: memory is bounded whatever the length. Unknown
// fields are ignored; malformed lines (anywhere in the stream) are counted
// and skipped. Blank lines are skipped silently. If w is not nil, every kept
// line is copied to it verbatim (newline-terminated).
func SummarizeSteps(ctx context.Context, r io.Reader, fromUs, toUs int64, w io.Writer) (StepStats, error) {
	var (
		st     StepStats
		timers [NumTimers]counter
		rec    StepRecord
		sp     = stepParser{skip: stepSkip} // only timers and the path are read
		bw     *bufio.Writer
	)
	if w != nil {
		bw = bufio.NewWriterSize(w, 1<<16)
	}
	lr := newLineReader(r)
	for lineNo := int64(1); ; lineNo++ {
		if lineNo%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return st, err
			}
		}
		line, tooLong, err := lr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return st, fmt.Errorf("engine_step.jsonl: read after line %d: %w", lineNo-1, err)
		}
		if tooLong {
			st.malformed(lineNo, fmt.Errorf("line longer than %d bytes", maxLineSize))
			continue
		}
		if len(line) == 0 || (isWS(line[0]) && skipWS(line, 0) == len(line)) {
			continue
		}
		if err := sp.parse(line, &rec); err != nil {
			st.malformed(lineNo, err)
			continue
		}
		if (fromUs != 0 && rec.TsUs < fromUs) || (toUs != 0 && rec.TsUs > toUs) {
			continue
		}
		if st.NSteps == 0 || rec.TsUs < st.FirstTsUs {
			st.FirstTsUs = rec.TsUs
		}
		if rec.TsUs > st.LastTsUs {
			st.LastTsUs = rec.TsUs
		}
		st.NSteps++
		if v, ok := rec.Get(FieldBatchQueue); ok && v == 1 {
			st.BatchQueueSteps++
		}
		for h := rec.Has & (1<<NumTimers - 1); h != 0; h &= h - 1 {
			i := bits.TrailingZeros32(h)
			timers[i].add(rec.Values[i])
		}
		if bw != nil {
			bw.Write(line)
			if err := bw.WriteByte('\n'); err != nil {
				return st, fmt.Errorf("copy of step lines: %w", err)
			}
		}
	}
	if bw != nil {
		if err := bw.Flush(); err != nil {
			return st, fmt.Errorf("copy of step lines: %w", err)
		}
	}
	st.Timers = make(map[string]Quantiles)
	for i := range timers {
		if timers[i].n > 0 {
			st.Timers[TimerNames[i]] = timers[i].quantiles()
		}
	}
	return st, nil
}

func (st *StepStats) malformed(lineNo int64, err error) {
	st.Malformed++
	if st.FirstMalformed == "" {
		st.FirstMalformed = fmt.Sprintf("line %d: %v", lineNo, err)
	}
}
