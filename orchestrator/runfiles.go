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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
)

// collectSteps fetches each instance's step log from the offset it had at
// the start of the run, keeps the lines inside the measured window, writes
// them to the run directory and summarizes them.
func (s *Sweep) collectSteps(ctx context.Context, es *engineSet, offsets []int64, res *openloop.Result, dir string) (*probes.StepStats, error) {
	flush := 300 * time.Millisecond
	if !s.isSim() {
		flush = 1500 * time.Millisecond // the vLLM plugin flushes at least once a second
	}
	if err := sleepCtx(ctx, flush); err != nil {
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

// mergeWorkers folds the worker-side get_finished timings that vLLM worker
// processes log per pid into the engine's step lines; without worker files
// the lines pass through unchanged (and the stats are nil).
func (s *Sweep) mergeWorkers(ctx context.Context, p *engineProc, main *bytes.Buffer, out *bytes.Buffer) (*probes.MergeStats, error) {
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
		if err := syncDir(d); err != nil {
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
	if isDiskFull(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
}

func firstLine(s string) string {
	if i := bytes.IndexByte([]byte(s), '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
