package report

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/results/sweepdir"
)

// ExportInput describes a (possibly partial) sweep directory for Export:
// the sweep to analyse, where its runs are, and how to write what is made
// of it.
type ExportInput struct {
	results.Sweep
	Dir    string              // the sweep directory; run directories are relative to it
	Redact func(string) string // applied to all text written, when non-nil
	// InMemory computes the exports without writing anything under Dir:
	// report.md, tables.csv and the cell summaries go to Exported.Contents,
	// and report.html and the plots are not made. A read-only export (of a
	// live sweep, or with overrides of the recorded method) uses it, with
	// Sweep.Capacity computed by the caller; without InMemory, Export reads
	// Dir/capacity.json.
	InMemory bool
}

// Exported is what Export wrote and found.
type Exported struct {
	Dir         string                  // the sweep directory
	Files       []string                // files written, relative to Dir, sorted
	Cells       []results.CellSummary   // in the order of ExportInput.Cells
	Comparisons []results.ComparisonRow // config vs baseline
	NoiseFloor  []results.ComparisonRow // A/A control vs its original
	Nuisance    []results.Nuisance      // the position-in-block effect per compared metric
	Warnings    []string                // problems that did not stop the export
	// Contents holds what an InMemory export made, by path relative to Dir
	// (report.md, tables.csv, cells/<id>/summary_A.json).
	Contents map[string][]byte
}

// Export analyses the sweep under in.Dir (sweepdir.Analyze) and writes,
// under in.Dir, the cell summaries (cells/<id>/summary_A.json), report.md,
// report.html (html.go), tables.csv, instances.csv and plots/, each
// atomically. It works on partial sweeps: missing cells, blocks and
// unreadable summaries are reported in the files and in
// Exported.Warnings; only bad arguments and write failures are errors.
func Export(ctx context.Context, in ExportInput) (*Exported, error) {
	if in.Dir == "" {
		return nil, errors.New("export: sweep directory not set")
	}
	sw := in.Sweep
	if !in.InMemory { // the directory's, not a caller's (which may be stale)
		sw.Capacity, sw.CapacityErr = sweepdir.Capacity(in.Dir)
	}
	a, err := sweepdir.Analyze(ctx, in.Dir, sw)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	rep := &Exported{Dir: in.Dir, Warnings: append([]string(nil), a.Warnings...)}
	w := &writer{in: &in, rep: rep}
	for _, c := range a.Cells {
		rep.Cells = append(rep.Cells, c.Sum)
		b, err := sweepdir.EncodeJSON(redactCell(c.Sum, in.redact))
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
	rd := renderer{redact: in.redact, logs: sweepdir.Logs{Dir: in.Dir}, warn: rep.warn}
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
	for _, f := range []struct {
		name   string
		render func(*results.Analysis, func(string) string) ([]byte, error)
	}{{"tables.csv", renderCSV}, {"instances.csv", renderInstancesCSV}} {
		text, err := f.render(a, in.redact)
		if err == nil {
			err = w.write(f.name, text)
		}
		if err != nil {
			return nil, err
		}
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
	rep *Exported
}

// write writes rel (relative to the sweep directory) atomically, or, for
// an InMemory export, keeps it in Exported.Contents.
func (w *writer) write(rel string, data []byte) error {
	if w.in.InMemory {
		if w.rep.Contents == nil {
			w.rep.Contents = map[string][]byte{}
		}
		w.rep.Contents[filepath.ToSlash(rel)] = data
		return nil
	}
	if err := sweepdir.WriteFile(w.in.Dir, rel, data); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	w.rep.Files = append(w.rep.Files, filepath.ToSlash(rel))
	return nil
}

// warn records a problem that does not stop the export.
func (r *Exported) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// redactCell applies the redactor to every free-text field of a cell summary.
func redactCell(cs results.CellSummary, red func(string) string) results.CellSummary {
	cs.Cell, cs.Config, cs.Shape, cs.SameAs, cs.Engine = red(cs.Cell), red(cs.Config), red(cs.Shape), red(cs.SameAs), red(cs.Engine)
	runs := make([]results.CellRun, len(cs.Runs))
	for i, r := range cs.Runs {
		r.Reason, r.Dir, r.SaturationReason, r.ClientLimitedReason = red(r.Reason), red(r.Dir), red(r.SaturationReason), red(r.ClientLimitedReason)
		runs[i] = r
	}
	cs.Runs = runs
	return cs
}
