package orchestrator

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/results"
)

// ExportDir (re)writes the exports of the sweep in dir — per-cell
// summaries, report.md, tables.csv and plots — from sweep.json, the journal
// and the run directories. It works on a partial sweep too, where missing
// cells are marked. It returns the path of report.md.
func ExportDir(ctx context.Context, dir string) (string, error) {
	if _, err := ExportReport(ctx, dir); err != nil {
		return "", err
	}
	return filepath.Join(dir, "report.md"), nil
}

// ExportReport is ExportDir returning what was computed: the per-cell
// statistics, the comparisons and the A/A noise floor.
func ExportReport(ctx context.Context, dir string) (*results.Report, error) {
	st, err := ReadSweep(dir)
	if err != nil {
		return nil, err
	}
	entries, _, err := ReadJournal(dir)
	if err != nil {
		return nil, err
	}
	sw := results.Sweep{
		Dir:        dir,
		Name:       st.Name,
		Confidence: 0.95,
		Blocks:     len(st.Blocks),
		Env:        st.Fingerprint,
		Simulated:  st.Simulated,
	}
	// The resolved matrix is recorded without secrets; reload the matrix
	// itself only for the redactor, the baseline and the compared metrics.
	if m, err := matrices.Load(st.MatrixFile); err == nil {
		sw.Baseline, sw.Compare, sw.Redact = m.Baseline, m.Compare, m.Redact
		sw.Confidence, sw.Metric, sw.RelCI = m.Repeat.Confidence, m.Repeat.Metric, m.Repeat.RelCI
	} else if b, c, conf, ok := resolvedBasics(st); ok {
		sw.Baseline, sw.Compare, sw.Confidence = b, c, conf
	}
	if st.Design != nil {
		sw.Design = st.Design.Kind + ", " + st.Design.Balance.Words
	}
	sw.Stage1 = st.Stage1
	pos := map[runKey]int{}
	for _, b := range st.Blocks {
		for i, id := range b.Order {
			pos[runKey{id, b.Block}] = i + 1
		}
	}
	if st.Stop != nil {
		sw.StopReason = st.Stop.Reason
	} else {
		sw.StopReason = "not finished: the sweep is partial (resume it with mbench resume " + dir + ")"
	}
	for _, c := range st.Cells {
		sw.Cells = append(sw.Cells, results.CellInfo{ID: c.ID, Config: c.Config, Shape: c.Shape, Rate: c.Rate, SameAs: c.SameAs})
	}
	idx := journalIndex(entries)
	keys := make([]runKey, 0, len(idx))
	for k := range idx {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].block != keys[j].block {
			return keys[i].block < keys[j].block
		}
		return keys[i].cell < keys[j].cell
	})
	for _, k := range keys {
		e := idx[k]
		sw.Runs = append(sw.Runs, results.RunRef{Cell: e.Cell, Block: e.Block, Dir: e.Dir, Status: e.Status, Reason: e.Reason, Position: pos[k]})
	}
	rep, err := results.Export(ctx, sw)
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", dir, err)
	}
	return rep, nil
}
