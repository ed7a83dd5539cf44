package orchestrator

// The files of a run directory: the step log slice, moving a partial
// directory aside, durability before the journal line.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mbench/mbench/internal/clock"
	"github.com/mbench/mbench/internal/durable"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
)

// collectSteps fetches each instance's step log from the offset it had at
// the start of the run, keeps the lines inside the measured window, writes
// them to the run directory and summarizes them.
func (s *runner) collectSteps(ctx context.Context, es *engineSet, offsets []int64, res *openloop.Result, dir string) (*probes.StepStats, error) {
	flush := 300 * time.Millisecond // the sim flushes its step log every 200 ms
	if !s.isSim() {
		flush = 1500 * time.Millisecond // the vLLM plugin flushes at least once a second
	}
	if err := s.waitStepsFlushed(ctx, es, res.WindowEnd, flush); err != nil {
		return nil, err
	}
	var raw bytes.Buffer
	var workers *probes.MergeStats
	any := false
	for i, p := range es.procs {
		if p.stepLog == "" {
			continue
		}
		var part bytes.Buffer
		if _, err := p.host.Get(ctx, p.stepLog, offsets[i], &part); err != nil {
			s.logf("warning: %s: fetch step log %s: %v", p.name, p.stepLog, err)
			continue
		}
		any = true
		ms, err := s.mergeWorkers(ctx, p, &part, &raw)
		if err != nil {
			return nil, err
		}
		if ms != nil {
			if workers == nil {
				workers = new(probes.MergeStats)
			}
			workers.Add(*ms)
		}
	}
	if !any {
		return nil, nil
	}
	out, err := os.Create(filepath.Join(dir, "engine_step.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("create engine_step.jsonl: %w", err)
	}
	st, err := probes.SummarizeSteps(ctx, &raw, res.WindowStart.UnixMicro(), res.WindowEnd.UnixMicro(), out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("slice step log: %w", err)
	}
	st.Workers = workers
	return &st, nil
}

// waitStepsFlushed waits until every instance's step log holds a step that
// ended at or after windowEnd — the event that says the window's steps are
// all on disk — polling its tail at short, growing intervals, at most for
// limit (an engine idle since before windowEnd writes no such step).
func (s *runner) waitStepsFlushed(ctx context.Context, es *engineSet, windowEnd time.Time, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	endUs := windowEnd.UnixMicro()
	pending := slices.DeleteFunc(slices.Clone(es.procs), func(p *engineProc) bool { return p.stepLog == "" })
	// The sim flushes its log the moment it goes idle, and its last step
	// ends just before the last token reaches the client: a log that stopped
	// growing with a step that ended in the last stepSlack of the window is
	// complete.
	const stepSlack = 50 * time.Millisecond
	lastSize := map[*engineProc]int64{}
	for wait := 5 * time.Millisecond; len(pending) > 0; wait = min(2*wait, 50*time.Millisecond) {
		left := pending[:0]
		for _, p := range pending {
			known, ok := lastSize[p]
			if !ok {
				known = -1
			}
			ts, size := lastStepEndUs(ctx, p, known)
			idleFlushed := s.isSim() && size > 0 && size == known && ts >= endUs-stepSlack.Microseconds()
			lastSize[p] = size
			if ts < endUs && !idleFlushed {
				left = append(left, p)
			}
		}
		pending = left
		if len(pending) == 0 || !time.Now().Before(deadline) {
			return nil
		}
		if err := clock.Sleep(ctx, min(wait, time.Until(deadline))); err != nil {
			return err
		}
	}
	return nil
}

// lastStepEndUs is ts_us of the last complete record of p's step log, read
// from its last 8 KiB (0 when there is none), and the log's size. known is
// a size the log had at an earlier poll (-1: none): the read then starts
// 8 KiB before it and gives the size too, one command on the host instead
// of two (a size, then a read).
func lastStepEndUs(ctx context.Context, p *engineProc, known int64) (tsUs, size int64) {
	const tailBytes = 8 << 10
	if known <= 0 {
		n, err := p.host.Size(ctx, p.stepLog)
		if err != nil || n == 0 {
			return 0, 0
		}
		known = n
	}
	off := max(0, known-tailBytes)
	var tail bytes.Buffer
	n, err := p.host.Get(ctx, p.stepLog, off, &tail)
	if err != nil {
		return 0, known
	}
	if n == 0 && off > 0 { // shorter than it was: a new log, asked afresh
		return lastStepEndUs(ctx, p, -1)
	}
	size = off + n
	b := tail.Bytes()
	if len(b) > tailBytes {
		b = b[len(b)-tailBytes:]
	}
	ts, _ := probes.LastStepEndUs(b) // 0 without a complete record
	return ts, size
}

// mergeWorkers folds the worker-side get_finished timings that vLLM worker
// processes log per pid into the engine's step lines; without worker files
// the lines pass through unchanged (and the stats are nil).
func (s *runner) mergeWorkers(ctx context.Context, p *engineProc, main *bytes.Buffer, out *bytes.Buffer) (*probes.MergeStats, error) {
	files := workerLogs(ctx, p.host, p.stepLog)
	if len(files) == 0 {
		_, err := out.Write(main.Bytes())
		return nil, err
	}
	var readers []io.Reader
	for _, f := range files {
		var b bytes.Buffer
		if _, err := p.host.Get(ctx, f, 0, &b); err != nil {
			s.logf("warning: %s: fetch worker step log %s: %v", p.name, f, err)
			continue
		}
		readers = append(readers, &b)
	}
	ms, err := probes.MergeWorkerTimings(ctx, main, readers, out)
	if err != nil {
		return nil, fmt.Errorf("merge worker step timings of %s: %w", p.name, err)
	}
	return &ms, nil
}

// moveAside keeps a partial run directory left by an interrupted run as
// b<k>.partial-<n>; nothing is deleted.
func moveAside(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for n := 1; ; n++ {
		dst := dir + ".partial-" + strconv.Itoa(n)
		if _, err := os.Stat(dst); errors.Is(err, os.ErrNotExist) {
			if err := os.Rename(dir, dst); err != nil {
				return fmt.Errorf("move partial run aside: %w", err)
			}
			return nil
		}
	}
}

// moveAsideRetries moves aside (moveAside) the re-run attempts of block b
// in cellDir: b<k>-try<n>, not their own partials.
func moveAsideRetries(cellDir string, b int) error {
	tries, err := filepath.Glob(filepath.Join(cellDir, "b"+strconv.Itoa(b)+"-try*"))
	if err != nil {
		return fmt.Errorf("list re-run attempts: %w", err)
	}
	for _, d := range tries {
		if strings.Contains(filepath.Base(d), ".partial-") {
			continue
		}
		if err := moveAside(d); err != nil {
			return err
		}
	}
	return nil
}

// syncTree fsyncs every file of a run directory, the directory itself and
// its parents up to the results directory (runs/<cell>/b<k>).
func syncTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("sync run directory: %w", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("sync run directory: %w", err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", filepath.Join(dir, e.Name()), err)
		}
	}
	for _, d := range []string{dir, filepath.Dir(dir), filepath.Dir(filepath.Dir(dir))} {
		if err := durable.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// diskFull reports an error caused by a full disk (or quota), also when a
// layer below formatted the cause into text instead of wrapping it.
func diskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
