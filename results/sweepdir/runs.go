package sweepdir

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/results"
)

// Analyze analyses the sweep sw whose run directories are under dir
// (results.Analyze), reading each run's summary_A.json and, where the
// class comparisons pair requests, its requests.jsonl. A missing or
// unreadable file is the run's problem in the analysis; only a canceled
// ctx and bad arguments are errors.
func Analyze(ctx context.Context, dir string, sw results.Sweep) (*results.Analysis, error) {
	return results.Analyze(sw, func(ref results.RunRef) (results.RunFile, error) { return readRun(ctx, dir, ref) })
}

// Capacity is dir's capacity search (capacity.json): nil, nil for a
// fixed-rate sweep, the error when the file exists but cannot be read.
func Capacity(dir string) (*results.CapacityReport, error) {
	rep, err := ReadCapacity(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return rep, err
}

// readRun reads what the analysis takes of run ref: its summary, and for a
// usable run with request classes the TTFT of each request. A summary that
// is missing or unreadable is the run's problem, not an error; only a
// canceled ctx is.
func readRun(ctx context.Context, dir string, ref results.RunRef) (results.RunFile, error) {
	if err := ctx.Err(); err != nil {
		return results.RunFile{}, err
	}
	if !filepath.IsLocal(ref.Dir) {
		return results.RunFile{Problem: fmt.Sprintf("run directory %q is outside the sweep", ref.Dir)}, nil
	}
	sum, err := ReadRunSummary(filepath.Join(dir, ref.Dir, "summary_A.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return results.RunFile{Problem: "its summary_A.json is missing"}, nil
	}
	if err != nil { // name the file relative to the sweep, not the machine
		return results.RunFile{Problem: strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")}, nil
	}
	f := results.RunFile{Sum: sum}
	if ref.Status.Usable() && sum.Classes != nil {
		f.TTFTs = readTTFTs(filepath.Join(dir, ref.Dir, "requests.jsonl"))
	}
	return f, nil
}

// readTTFTs reads a run's requests.jsonl: the TTFT in ms of each completed
// measured request, by id; nil when the file cannot be read.
func readTTFTs(path string) map[int]float64 {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	recs, err := openloop.ReadRecords(f)
	if err != nil {
		return nil
	}
	out := map[int]float64{}
	for i := range recs {
		r := &recs[i]
		if t, ok := r.TTFTMs(); ok && r.Phase == openloop.PhaseMeasure && r.OK() {
			out[r.ID] = t
		}
	}
	return out
}

// Logs reads the raw logs of the runs under a sweep directory, which
// report.html and the plots draw (report.Logs).
type Logs struct{ Dir string }

// StepDurations streams step_duration_us (> 0) of run's engine_step.jsonl
// into add, parsing with probes (which owns the format) and skipping
// malformed lines; a run without the file is not an error.
func (l Logs) StepDurations(run string, add func(us float64)) error {
	return l.eachStep(run, func(rec *probes.StepRecord) {
		if d, ok := rec.Get(probes.FieldStepDuration); ok && d > 0 && !math.IsInf(d, 0) {
			add(d)
		}
	})
}

// StepWaiting streams the engine's queue (num_waiting) of run's
// engine_step.jsonl with each line's time (ts_us) into add, skipping lines
// without either; a run without the file is not an error.
func (l Logs) StepWaiting(run string, add func(tsUs int64, waiting float64)) error {
	return l.eachStep(run, func(rec *probes.StepRecord) {
		if w, ok := rec.Get(probes.FieldNumWaiting); ok && rec.TsUs > 0 && w >= 0 && !math.IsInf(w, 0) {
			add(rec.TsUs, w)
		}
	})
}

// eachStep streams the lines of run's engine_step.jsonl that parse into
// fn, with probes (which owns the format); a run without the file is not
// an error.
func (l Logs) eachStep(run string, fn func(*probes.StepRecord)) error {
	path := filepath.Join(l.Dir, run, "engine_step.jsonl")
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var rec probes.StepRecord
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 && probes.ParseStepLine(bytes.TrimRight(line, "\r\n"), &rec) == nil {
			fn(&rec)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// Requests reads run's requests.jsonl: nil, nil without one.
func (l Logs) Requests(run string) ([]openloop.Record, error) {
	return readRunFile(filepath.Join(l.Dir, run, "requests.jsonl"), openloop.ReadRecords)
}

// GPUSamples reads run's gpu.jsonl: nil, nil without one; with a bad line,
// the samples before it and the error.
func (l Logs) GPUSamples(run string) ([]probes.GPUSample, error) {
	return readRunFile(filepath.Join(l.Dir, run, "gpu.jsonl"), probes.ReadGPUSamples)
}

// readRunFile reads a file of a run with read: nil, nil when there is
// none; read's error names the file.
func readRunFile[T any](path string, read func(io.Reader) ([]T, error)) ([]T, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	xs, err := read(f)
	if err != nil {
		return xs, fmt.Errorf("%s: %w", path, err)
	}
	return xs, nil
}
