package orchestrator

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/results"
)

// A journaled run's summary must be that run's: its cell, block and verdict
// are the journal line's, or resume redoes the run.
func TestRunFilesProblemChecksIdentity(t *testing.T) {
	dir := t.TempDir()
	e := JournalEntry{RunRef: results.RunRef{Cell: "plain-r20", Block: 2, Status: results.VerdictOK, Dir: "runs/plain-r20/b2"}}
	write := func(s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, e.Dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Dir, "summary_A.json"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ summary, want string }{
		{`{"cell":"plain-r20","block":2,"verdict":"ok"}`, ""},
		{`{}`, `names cell ""`},
		{`{"cell":"walk-r20","block":2,"verdict":"ok"}`, `names cell "walk-r20"`},
		{`{"cell":"plain-r20","block":1,"verdict":"ok"}`, "names block 1, not 2"},
		{`{"cell":"plain-r20","block":2,"verdict":"saturated"}`, `verdict "saturated" is not the journal's ok`},
		{`{"cell":"plain-r20","block":2}`, `verdict "" is not the journal's ok`},
	} {
		write(c.summary)
		got := runFilesProblem(dir, e)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: problem %q, want %q", c.summary, got, c.want)
		}
	}
}
