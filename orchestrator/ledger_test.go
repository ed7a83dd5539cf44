package orchestrator

import (
	"encoding/json"
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

// TestRecordFormats: journal lines and sweep.json's cells written by
// earlier versions (every field set, and the fewest) read back and are
// written again byte for byte, so a resumed sweep reads old journals and a
// repaired journal keeps its lines.
func TestRecordFormats(t *testing.T) {
	dir := t.TempDir()
	journal := `{"cell":"b8656c46a761","block":1,"status":"client_limited","dir":"runs/b8656c46a761/b1-try3","reason":"client_limited: behind","started":"2026-12-06T08:18:13.044237907Z","finished":"2026-12-06T08:18:17.337495664Z","mbench":{"rss_kib":35304,"fds":18,"goroutines":8},"nodes":["h: slurm job 7 node n1"],"attempt":3,"superseded":[{"dir":"runs/b8656c46a761/b1","status":"client_limited","reason":"behind"}]}
{"cell":"4025cede2322","block":2,"status":"ok","dir":"runs/4025cede2322/b2","started":"2026-12-06T08:18:53.094129908Z","finished":"2026-12-06T08:18:58.32635933Z"}
`
	if err := os.WriteFile(filepath.Join(dir, journalFile), []byte(journal), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, torn, err := readJournal(dir)
	if err != nil || torn || len(entries) != 2 {
		t.Fatalf("readJournal: %d entries, torn %v, %v", len(entries), torn, err)
	}
	if e := entries[0]; e.Cell != "b8656c46a761" || e.Block != 1 || e.Status != results.VerdictClientLimited || e.Attempt != 3 || len(e.Superseded) != 1 {
		t.Errorf("first line read as %+v", e)
	}
	if err := repairJournal(dir, entries); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, journalFile)); string(got) != journal {
		t.Errorf("journal rewritten as\n%s\nwant\n%s", got, journal)
	}

	cells := `[{"id":"a1","config":"plain","rate":10,"shape":"64x8"},{"id":"b2","config":"aa","rate":2.5,"shape":"s","same_as":"plain","attempt":1}]`
	var cs []results.CellInfo
	if err := json.Unmarshal([]byte(cells), &cs); err != nil {
		t.Fatal(err)
	}
	if got, err := json.Marshal(cs); err != nil || string(got) != cells {
		t.Errorf("cells rewritten as %s (%v), want %s", got, err, cells)
	}
}
