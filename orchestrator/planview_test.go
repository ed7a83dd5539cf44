package orchestrator

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/results/sweepdir"
)

// viewSweep is a sweep of testdata/two-configs.yaml in a temporary directory whose journal
// holds blocks 1..len(status) of every cell, each run's ttft_p90 its block
// number, with the given verdicts.
func viewSweep(t *testing.T, status ...results.Verdict) *sweep {
	t.Helper()
	m, err := matrices.Load("testdata/two-configs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := newSweep(m, dir, Options{})
	s.state = &SweepState{Seed: m.Seed, Cells: cellRecords(m), Created: time.Now()}
	for _, c := range s.state.Cells {
		for b := 1; b <= len(status); b++ {
			rel := filepath.Join("runs", c.ID, fmt.Sprintf("b%d", b))
			if err := os.MkdirAll(filepath.Join(dir, rel), 0o755); err != nil {
				t.Fatal(err)
			}
			p90 := float64(b)
			if err := sweepdir.WriteRunSummary(filepath.Join(dir, rel, "summary_A.json"), &results.RunSummary{Cell: c.ID, Block: b, P90TTFTMs: &p90}); err != nil {
				t.Fatal(err)
			}
			s.ledger.runs[runKey{c.ID, b}] = JournalEntry{RunRef: results.RunRef{Cell: c.ID, Block: b, Status: status[b-1], Dir: rel}}
		}
	}
	return s
}

// TestPlanViewUsableRuns: the plan sees the primary metric of usable runs
// only (a saturated or failed run is not a result), each read from its
// summary once; a cell given up is dead in the view.
func TestPlanViewUsableRuns(t *testing.T) {
	s := viewSweep(t, results.VerdictOK, results.VerdictSaturated, results.VerdictOK, results.VerdictFailed)
	id := s.state.Cells[0].ID
	s.ledger.dead[id] = "three failures"
	v := s.store.planView(s.m.Repeat, s.m.Baseline, 3, 4)
	if v.Done != 4 || len(v.Cells) != 4 || !v.Dead[id] || len(v.Dead) != 1 {
		t.Fatalf("view: done %d, %d cells, dead %v", v.Done, len(v.Cells), v.Dead)
	}
	for _, c := range s.state.Cells {
		if got := v.Values[c.ID]; len(got) != 2 || got[1] != 1 || got[3] != 3 {
			t.Errorf("cell %s: values %v, want blocks 1 and 3 only (the ok runs)", c.ID, got)
		}
	}
	// Read once: with the summaries gone the view still has the values.
	if err := os.RemoveAll(filepath.Join(s.dir, "runs")); err != nil {
		t.Fatal(err)
	}
	if got := s.store.planView(s.m.Repeat, s.m.Baseline, 3, 4).Values[id]; len(got) != 2 {
		t.Errorf("after the summaries were removed: %v; want the values read before", got)
	}
	// An unreadable summary gives no value (and no error).
	fresh := viewSweep(t, results.VerdictOK)
	if err := os.WriteFile(filepath.Join(fresh.dir, fresh.ledger.runs[runKey{id, 1}].Dir, "summary_A.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := fresh.store.planView(fresh.m.Repeat, fresh.m.Baseline, 3, 1).Values[id]; len(got) != 0 {
		t.Errorf("corrupt summary: values %v, want none", got)
	}
}
