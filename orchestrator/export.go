package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/results/report"
	"github.com/mbench/mbench/results/sweepdir"
)

// ExportOverrides change how an export analyses a sweep, against what the
// sweep recorded; the report states every override. Zero values keep the
// recorded method.
type ExportOverrides struct {
	Confidence float64 // of CIs and tests
	Baseline   string  // the config every other config is compared with
}

// ErrBadOverride marks an export override that does not fit the sweep (a
// baseline that is not one of its configs): bad usage, not a failure.
var ErrBadOverride = errors.New("bad export override")

// ExportView computes the exports of the sweep in dir as ExportReport does,
// with ov, and returns them in Report.Contents (report.md, tables.csv, the
// cell summaries) without writing anything or taking the directory's lock:
// it reads a sweep that another mbench is running, or one on a read-only
// file system. A run whose journal line is being written when it reads is
// left out (a torn last line); every file it reads is written atomically.
func ExportView(ctx context.Context, dir string, ov ExportOverrides) (*report.Exported, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return exportSweep(ctx, dir, ov, true)
}

// ExportReport (re)writes the exports of the sweep in dir — per-cell
// summaries, report.md, tables.csv and plots — from sweep.json, the journal
// and the run directories, and returns what was computed: the per-cell
// statistics, the comparisons and the A/A noise floor. It works on a partial
// sweep too, where missing cells are marked. It takes the directory's lock
// and first removes temporary files an interrupted writer left. The method
// (baseline, compared metrics, confidence) is the one recorded in
// sweep.json, changed only by ov.
func ExportReport(ctx context.Context, dir string, ov ExportOverrides) (*report.Exported, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	if _, err := ReadSweep(dir); err != nil {
		return nil, err
	}
	cleanTemps(dir)
	return exportSweep(ctx, dir, ov, false)
}

// exportSweep computes the exports of dir: written into it, or, inMemory,
// returned in Report.Contents with nothing written.
func exportSweep(ctx context.Context, dir string, ov ExportOverrides, inMemory bool) (*report.Exported, error) {
	st, err := ReadSweep(dir)
	if err != nil {
		return nil, err
	}
	entries, _, err := readJournal(dir)
	if err != nil {
		return nil, err
	}
	capRep, err := capacityExport(dir, st, entries) // capacity searches only (capacity.go)
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", dir, err)
	}
	if capRep != nil && !inMemory {
		if err := sweepdir.WriteCapacity(filepath.Join(dir, results.CapacityFile), capRep); err != nil {
			return nil, fmt.Errorf("export %s: %w", dir, err)
		}
	}
	sw := report.ExportInput{
		InMemory: inMemory,
		Dir:      dir,
		Sweep: results.Sweep{
			Capacity:   capRep,
			Name:       st.Name,
			Confidence: 0.95,
			Blocks:     len(st.Blocks),
			Env:        slurmEnv(st.Fingerprint, entries), // with the slurm job and nodes of the runs
			Simulated:  st.Simulated,
		},
	}
	// Everything written into the sweep directory was redacted when it was
	// written, so export needs no secrets, and so no matrix file.
	rm, err := resolvedMethod(st)
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", dir, err)
	}
	sw.Baseline, sw.Compare = rm.Baseline, rm.Compare
	if len(rm.Metadata) > 0 {
		env := maps.Collect(maps.All(sw.Env)) // a copy, never nil
		for k, v := range rm.Metadata {
			env["metadata: "+k] = v
		}
		sw.Env = env
	}
	sw.Confidence, sw.Metric, sw.RelCI = rm.Repeat.Confidence, rm.Repeat.Metric, rm.Repeat.RelCI
	if err := ov.apply(&sw, st); err != nil {
		return nil, fmt.Errorf("export %s: %w", dir, err)
	}
	if st.Design != nil {
		sw.Design = st.Design.Kind + ", " + st.Design.Balance.Words
	}
	sw.Stage1 = st.Stage1
	if st.Stop != nil {
		sw.StopReason = st.Stop.Reason
		sw.RuleStop = st.Stop.RuleStop
	} else {
		sw.StopReason = "not finished: the sweep is partial (resume it with mbench resume " + dir + ")"
	}
	sw.Cells = st.Cells
	sw.Runs, sw.Superseded = exportRuns(st, entries)
	rep, err := report.Export(ctx, sw)
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", dir, err)
	}
	return rep, nil
}

// apply changes sw's recorded method by ov and states each change.
func (ov ExportOverrides) apply(sw *report.ExportInput, st *SweepState) error {
	if ov.Confidence != 0 && ov.Confidence != sw.Confidence {
		sw.Overrides = append(sw.Overrides, fmt.Sprintf("confidence %g, where the sweep recorded %g (mbench export --confidence)", ov.Confidence, sw.Confidence))
		sw.RecordedConfidence, sw.Confidence = sw.Confidence, ov.Confidence
	}
	if ov.Baseline != "" && ov.Baseline != sw.Baseline {
		if !slices.ContainsFunc(st.Cells, func(c results.CellInfo) bool { return c.Config == ov.Baseline }) {
			return fmt.Errorf("%w: --baseline %q is not a config of the sweep", ErrBadOverride, ov.Baseline)
		}
		sw.Overrides = append(sw.Overrides, fmt.Sprintf("baseline %s, where the sweep recorded %s (mbench export --baseline)", ov.Baseline, sw.Baseline))
		sw.Baseline = ov.Baseline
	}
	return nil
}

// exportRuns returns the journal's runs in (block, cell) order, each with
// its position in its block's order, and the attempts they superseded.
func exportRuns(st *SweepState, entries []JournalEntry) (runs, superseded []results.RunRef) {
	pos := map[runKey]int{}
	for _, b := range st.Blocks {
		for i, id := range b.Order {
			pos[runKey{id, b.Block}] = i + 1
		}
	}
	for _, e := range entries {
		if e.Status == results.VerdictHostLost {
			continue // no run: the report counts the runs made
		}
		for _, a := range e.Superseded {
			superseded = append(superseded, results.RunRef{Cell: e.Cell, Block: e.Block, Dir: a.Dir, Status: a.Status, Reason: a.Reason})
		}
	}
	idx := journalIndex(entries)
	keys := slices.SortedFunc(maps.Keys(idx), func(a, b runKey) int {
		return cmp.Or(cmp.Compare(a.block, b.block), cmp.Compare(a.cell, b.cell))
	})
	for _, k := range keys {
		ref := idx[k].RunRef
		ref.Position = pos[k]
		runs = append(runs, ref)
	}
	return runs, superseded
}
