package orchestrator

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mbench/mbench/results"
)

// TestLedger: three failures in a row give a cell up, a run that measured
// resets the count, the journal on disk replays to the same state (a torn
// last line repaired), and a skipped run after the cell was given up does
// not give it up again.
func TestLedger(t *testing.T) {
	dir := t.TempDir()
	l := newLedger(dir, 3)
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	rec := func(cell string, block int, v results.Verdict) bool {
		t.Helper()
		at = at.Add(time.Second)
		gaveUp, err := l.record(JournalEntry{RunRef: results.RunRef{Cell: cell, Block: block, Status: v, Reason: string(v) + " reason"}, Started: at, Finished: at})
		if err != nil {
			t.Fatal(err)
		}
		return gaveUp
	}
	steps := []struct {
		cell   string
		block  int
		v      results.Verdict
		gaveUp bool
	}{
		{"a", 1, results.VerdictFailed, false},
		{"a", 2, results.VerdictFailed, false},
		{"a", 3, results.VerdictSaturated, false}, // measured: the count starts again
		{"a", 4, results.VerdictFailed, false},
		{"a", 5, results.VerdictFailed, false},
		{"b", 1, results.VerdictOK, false},
		{"a", 6, results.VerdictFailed, true},
		{"a", 7, results.VerdictFailed, false}, // already given up
	}
	for _, st := range steps {
		if got := rec(st.cell, st.block, st.v); got != st.gaveUp {
			t.Errorf("%s b%d %s: gaveUp %v, want %v", st.cell, st.block, st.v, got, st.gaveUp)
		}
	}
	if l.deadReason("a") != "the cell failed 3 consecutive runs: failed reason" || l.deadReason("b") != "" || !l.done("a", 7) || l.done("b", 2) {
		t.Errorf("dead %v, runs %d", l.dead, len(l.runs))
	}
	// A crash tore the journal's last line: reopening repairs it and
	// replays the same state.
	f, err := os.OpenFile(filepath.Join(dir, journalFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"cell":"b","block":2,"sta`)
	f.Close()
	l2, err := openLedger(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(l2.runs) != len(steps) || l2.deadReason("a") != "the cell failed 3 consecutive runs: failed reason" || l2.fails["a"] != l.fails["a"] || l2.done("b", 2) {
		t.Errorf("replayed ledger: %d runs, dead %v, fails %v; want %d runs and the same state", len(l2.runs), l2.dead, l2.fails, len(steps))
	}
	entries, torn, err := readJournal(dir)
	if err != nil || torn || len(entries) != len(steps) {
		t.Errorf("journal after reopening: %d entries, torn %v, %v", len(entries), torn, err)
	}
}
