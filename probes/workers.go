package probes

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// WorkerLogGlob returns the glob pattern of the per-pid worker files that
// vLLM worker processes write next to a step log:
// "<steplog without .jsonl>.worker.*.jsonl".
func WorkerLogGlob(stepLog string) string {
	return strings.TrimSuffix(stepLog, ".jsonl") + ".worker.*.jsonl"
}

// MergeStats counts what MergeWorkerTimings did. Every worker line is
// counted once: WorkerLines = WorkerMalformed + WorkerMerged + WorkerUnmatched.
type MergeStats struct {
	Steps           int64 `json:"steps"`            // main lines written
	Merged          int64 `json:"merged"`           // steps that got get_finished_us from the workers
	MainMalformed   int64 `json:"main_malformed"`   // main lines copied through unchanged because unparsable
	WorkerLines     int64 `json:"worker_lines"`     // worker lines read
	WorkerMalformed int64 `json:"worker_malformed"` // worker lines skipped (no ts_us or get_finished_us)
	// WorkerMerged counts worker lines added into a step's get_finished_us.
	WorkerMerged int64 `json:"worker_merged"`
	// WorkerUnmatched counts valid worker lines in no step's interval
	// (between steps, before the first or after the last step line), or in
	// the interval of a step that already carried get_finished_us: their
	// time is in no step line.
	WorkerUnmatched int64 `json:"worker_unmatched"`
}

// Add accumulates o into st.
func (st *MergeStats) Add(o MergeStats) {
	st.Steps += o.Steps
	st.Merged += o.Merged
	st.MainMalformed += o.MainMalformed
	st.WorkerLines += o.WorkerLines
	st.WorkerMalformed += o.WorkerMalformed
	st.WorkerMerged += o.WorkerMerged
	st.WorkerUnmatched += o.WorkerUnmatched
}

// workerStream is one worker file with one parsed line of look-ahead.
type workerStream struct {
	lr     *lineReader
	idx    int
	peeked bool
	eof    bool
	ts     int64
	gf     float64
	pid    float64
}

// peek loads the next valid worker line; false at end of stream.
func (ws *workerStream) peek(st *MergeStats) (bool, error) {
	var rec StepRecord
	for !ws.peeked && !ws.eof {
		line, tooLong, err := ws.lr.next()
		if errors.Is(err, io.EOF) {
			ws.eof = true
			break
		}
		if err != nil {
			return false, fmt.Errorf("worker log %d: %w", ws.idx, err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		st.WorkerLines++
		if tooLong || parseFields(nil, line, &rec) != nil || rec.Has&(1<<FieldGetFinished) == 0 {
			st.WorkerMalformed++
			continue
		}
		ws.ts, ws.gf, ws.peeked = rec.TsUs, rec.Values[FieldGetFinished], true
		ws.pid = -1 - float64(ws.idx) // a file without pids counts as one worker
		if v, ok := rec.Get(FieldPID); ok {
			ws.pid = v
		}
	}
	return ws.peeked, nil
}

// MergeWorkerTimings writes the main step log (JSONL, binary records or
// both; written as JSONL) to w with get_finished_us
// filled in from the worker logs. For each main step, whose interval is
// (ts_us − step_duration_us, ts_us], it sums each worker pid's
// get_finished_us with ts_us inside the interval and takes the maximum over
// pids (the slowest worker gates the step). A main line that already has
// get_finished_us, or whose interval holds no worker line, is written
// unchanged; so are malformed main lines (SummarizeSteps counts them).
// unaccounted_us is left as is. Nothing is claimed about nesting: on the
// step() path the workers' get_finished overlaps the engine's execute_us
// wait; under the batch queue (async scheduling) it may belong to a batch
// launched one step earlier. Worker lines that fall in no step are counted
// (WorkerUnmatched), never silently dropped.
//
// All files are streamed in one pass and must each be in ts_us order (as
// appended); memory is O(number of worker pids).
func MergeWorkerTimings(ctx context.Context, main io.Reader, workers []io.Reader, w io.Writer) (MergeStats, error) {
	var st MergeStats
	streams := make([]*workerStream, len(workers))
	for i, r := range workers {
		streams[i] = &workerStream{lr: newLineReader(r), idx: i}
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	mr := newRecordReader(main)
	sums := make(map[float64]float64)
	var rec StepRecord
	var num, text []byte
	for lineNo := int64(1); ; lineNo++ {
		if lineNo%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return st, err
			}
		}
		kind, line, tooLong, err := mr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errMalformedRecord) {
			st.MainMalformed++
			st.Steps++
			continue
		}
		if err != nil {
			return st, fmt.Errorf("main step log: read after line %d: %w", lineNo-1, err)
		}
		if kind != kindText { // a binary record: merged in its JSONL form
			mr.recordOf(kind, &rec)
			text = AppendStepJSON(text[:0], &rec)
			line = text
		}
		if perr := ParseStepLine(line, &rec); tooLong || perr != nil {
			// A status or GPU line is not a step: passed through uncounted.
			if tooLong || !errors.Is(perr, errNoStepDuration) {
				st.Steps++
				if len(bytes.TrimSpace(line)) > 0 {
					st.MainMalformed++
				}
			}
			bw.Write(line)
			bw.WriteByte('\n')
			continue
		}
		start := rec.TsUs - int64(rec.Values[FieldStepDuration])
		_, has := rec.Get(FieldGetFinished)
		n, mx, err := gatherWorkers(streams, start, rec.TsUs, sums, &st)
		if err != nil {
			return st, err
		}
		end := bytes.LastIndexByte(line, '}')
		st.Steps++
		if has || n == 0 || end < 0 {
			st.WorkerUnmatched += n
			bw.Write(line)
			bw.WriteByte('\n')
			continue
		}
		st.Merged++
		st.WorkerMerged += n
		num = strconv.AppendFloat(num[:0], mx, 'f', -1, 64)
		bw.Write(line[:end])
		bw.WriteString(`,"get_finished_us":`)
		bw.Write(num)
		bw.WriteString("}\n")
	}
	// After the last step line every worker line is in no step.
	if _, _, err := gatherWorkers(streams, math.MaxInt64, math.MaxInt64, nil, &st); err != nil {
		return st, err
	}
	if err := bw.Flush(); err != nil {
		return st, fmt.Errorf("merged step log: %w", err)
	}
	return st, nil
}

// gatherWorkers consumes the worker lines with ts_us ≤ to. Of those with
// ts_us > from it returns the count and the largest sum of get_finished_us
// of one pid (the slowest worker); the others are counted unmatched. sums
// is its scratch space.
func gatherWorkers(streams []*workerStream, from, to int64, sums map[float64]float64, st *MergeStats) (n int64, slowest float64, err error) {
	clear(sums)
	for _, ws := range streams {
		for {
			ok, err := ws.peek(st)
			if err != nil {
				return n, 0, err
			}
			if !ok || ws.ts > to {
				break
			}
			if ws.ts > from {
				sums[ws.pid] += ws.gf
				n++
			} else {
				st.WorkerUnmatched++
			}
			ws.peeked = false
		}
	}
	for _, v := range sums {
		slowest = max(slowest, v)
	}
	return n, slowest, nil
}
