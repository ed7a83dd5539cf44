package results

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
	"sort"
	"strings"

	"github.com/mbench/mbench/internal/durable"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
)

// ExportInput describes a (possibly partial) sweep directory for Export:
// the sweep to analyse, where its runs are, and how to write what is made
// of it.
type ExportInput struct {
	Sweep
	Dir    string              // the sweep directory; run directories are relative to it
	Redact func(string) string // applied to all text written, when non-nil
	// InMemory computes the exports without writing anything under Dir:
	// report.md, tables.csv and the cell summaries go to Report.Contents,
	// and report.html and the plots are not made. A read-only export (of a
	// live sweep, or with overrides of the recorded method) uses it, with
	// Sweep.Capacity computed by the caller; without InMemory, Export reads
	// Dir/capacity.json.
	InMemory bool
}

// Report is what Export wrote and found.
type Report struct {
	Dir         string          // the sweep directory
	Files       []string        // files written, relative to Dir, sorted
	Cells       []CellSummary   // in the order of ExportInput.Cells
	Comparisons []ComparisonRow // config vs baseline
	NoiseFloor  []ComparisonRow // A/A control vs its original
	Nuisance    []Nuisance      // the position-in-block effect per compared metric
	Warnings    []string        // problems that did not stop the export
	// Contents holds what an InMemory export made, by path relative to Dir
	// (report.md, tables.csv, cells/<id>/summary_A.json).
	Contents map[string][]byte
}

// Export reads every run's summary_A.json and writes, under s.Dir, the cell
// summaries (cells/<id>/summary_A.json), report.md, report.html (html.go),
// tables.csv, instances.csv and plots/.
// Every file is written atomically. It works on partial sweeps: missing
// cells, blocks and unreadable summaries are reported in the files and in
// Report.Warnings; only bad arguments and write failures are errors.
func Export(ctx context.Context, in ExportInput) (*Report, error) {
	if in.Dir == "" {
		return nil, errors.New("export: sweep directory not set")
	}
	sw := in.Sweep
	if !in.InMemory { // the directory's, not a caller's (which may be stale)
		sw.Capacity, sw.CapacityErr = sweepCapacity(in.Dir)
	}
	a, err := Analyze(sw, func(ref RunRef) (RunFile, error) { return readRun(ctx, in.Dir, ref) })
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	rep := &Report{Dir: in.Dir, Warnings: append([]string(nil), a.Warnings...)}
	w := &writer{in: &in, rep: rep}
	for _, c := range a.Cells {
		rep.Cells = append(rep.Cells, c.Sum)
		b, err := encodeJSON(redactCell(c.Sum, in.redact))
		if err != nil {
			return nil, fmt.Errorf("export: encode cell %s: %w", c.Info.ID, err)
		}
		if err := w.write(filepath.Join("cells", c.Info.ID, "summary_A.json"), b); err != nil {
			return nil, err
		}
	}
	rep.Comparisons, rep.NoiseFloor, rep.Nuisance = a.Comparisons, a.NoiseFloor, a.Nuisance
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	rd := renderer{redact: in.redact, logs: dirLogs{in.Dir}, warn: rep.warn}
	if err := w.write("report.md", []byte(in.redact(renderReport(a)))); err != nil {
		return nil, err
	}
	if !in.InMemory {
		page, err := renderHTML(ctx, a, rd)
		if err != nil {
			return nil, err
		}
		if err := w.write("report.html", page); err != nil {
			return nil, err
		}
	}
	csvText, err := renderCSV(a, in.redact)
	if err != nil {
		return nil, err
	}
	if err := w.write("tables.csv", csvText); err != nil {
		return nil, err
	}
	instText, err := renderInstancesCSV(a, in.redact)
	if err != nil {
		return nil, err
	}
	if err := w.write("instances.csv", instText); err != nil {
		return nil, err
	}
	if !in.InMemory {
		save := func(name string, data []byte) error { return w.write(filepath.Join("plots", name), data) }
		if err := writePlots(ctx, a, rd, save); err != nil {
			return nil, err
		}
	}
	for _, c := range a.Cells {
		for _, r := range c.Runs {
			if r.Problem != "" && r.Ref.Status.Usable() {
				rep.warn("cell %s block %d (%s): %s", r.Ref.Cell, r.Ref.Block, r.Ref.Dir, r.Problem)
			}
		}
	}
	sort.Strings(rep.Files)
	return rep, nil
}

// redact applies the sweep's redactor.
func (in *ExportInput) redact(text string) string {
	if in.Redact == nil {
		return text
	}
	return in.Redact(text)
}

// writer writes files under the sweep directory and records them.
type writer struct {
	in  *ExportInput
	rep *Report
}

// write writes rel (relative to the sweep directory) atomically, or, for
// an InMemory export, keeps it in Report.Contents.
func (w *writer) write(rel string, data []byte) error {
	if w.in.InMemory {
		if w.rep.Contents == nil {
			w.rep.Contents = map[string][]byte{}
		}
		w.rep.Contents[filepath.ToSlash(rel)] = data
		return nil
	}
	path := filepath.Join(w.in.Dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := durable.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	w.rep.Files = append(w.rep.Files, filepath.ToSlash(rel))
	return nil
}

// warn records a problem that does not stop the export.
func (r *Report) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// sweepCapacity is dir's capacity search (capacity.json): nil, nil for a
// fixed-rate sweep, the error when the file exists but cannot be read.
func sweepCapacity(dir string) (*CapacityReport, error) {
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
func readRun(ctx context.Context, dir string, ref RunRef) (RunFile, error) {
	if err := ctx.Err(); err != nil {
		return RunFile{}, err
	}
	if !filepath.IsLocal(ref.Dir) {
		return RunFile{Problem: fmt.Sprintf("run directory %q is outside the sweep", ref.Dir)}, nil
	}
	sum, err := ReadRunSummary(filepath.Join(dir, ref.Dir, "summary_A.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return RunFile{Problem: "its summary_A.json is missing"}, nil
	}
	if err != nil { // name the file relative to the sweep, not the machine
		return RunFile{Problem: strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")}, nil
	}
	f := RunFile{Sum: sum}
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
		if r.Phase == openloop.PhaseMeasure && r.OK() && r.FirstTokenNs > 0 && r.SentNs > 0 {
			out[r.ID] = float64(r.FirstTokenNs-r.SentNs) / 1e6
		}
	}
	return out
}

// dirLogs reads the runs' raw logs under a sweep directory.
type dirLogs struct{ dir string }

// StepDurations streams step_duration_us (> 0) of run's engine_step.jsonl
// into add, parsing with probes (which owns the format) and skipping
// malformed lines; a run without the file is not an error.
func (l dirLogs) StepDurations(run string, add func(us float64)) error {
	var rec probes.StepRecord
	err := eachLine(filepath.Join(l.dir, run, "engine_step.jsonl"), func(line []byte) {
		if probes.ParseStepLine(bytes.TrimRight(line, "\r\n"), &rec) != nil {
			return
		}
		if d, ok := rec.Get(probes.FieldStepDuration); ok && d > 0 && !math.IsInf(d, 0) {
			add(d)
		}
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// GPUSamples reads run's gpu.jsonl: nil, nil without one; with a bad line,
// the samples before it and the error.
func (l dirLogs) GPUSamples(run string) ([]probes.GPUSample, error) {
	path := filepath.Join(l.dir, run, "gpu.jsonl")
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	samples, err := probes.ReadGPUSamples(f)
	if err != nil {
		return samples, fmt.Errorf("%s: %w", path, err)
	}
	return samples, nil
}

// eachLine calls fn for every non-empty line of a file, streaming.
func eachLine(path string, fn func([]byte)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			fn(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
}
