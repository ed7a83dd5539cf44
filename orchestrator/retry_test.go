package orchestrator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/results"
)

// TestLoopClientLimitedRunAgainInPlace: a run the load generator could not
// drive on schedule is run again at once, in the same block, into a
// directory of its own; only the last attempt is journaled, naming the
// earlier ones (the plan and the export use it, a run keeps one line), at
// most two re-runs are made, and the report says which runs were run again.
func TestLoopClientLimitedRunAgainInPlace(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	var plain1, taxed2 int
	f := &scripted{script: func(r run) (float64, results.Verdict, error) {
		switch {
		case r.cell.Config == "plain" && r.block == 1:
			if plain1++; plain1 == 1 {
				return 10, results.VerdictClientLimited, nil
			}
		case r.cell.Config == "taxed" && r.block == 2:
			taxed2++
			return 20, results.VerdictClientLimited, nil
		}
		return allOK(r)
	}}
	o, err := Run(context.Background(), "testdata/loop.yaml", loopOpts(out, f))
	if err != nil {
		t.Fatal(err)
	}
	if plain1 != 2 || taxed2 != 3 || len(f.runs) != 12+1+2 {
		t.Fatalf("measured plain b1 %d times, taxed b2 %d times, %d runs in all; want 2, 3 (two re-runs at most) and 15", plain1, taxed2, len(f.runs))
	}
	plain, taxed := cellID(t, out, "plain"), cellID(t, out, "taxed")
	journal := journalOf(t, out)
	keysOf(t, journal) // one line per run, whatever its attempts
	idx := journalIndex(journal)
	if e := idx[runKey{plain, 1}]; e.Status != results.VerdictOK || e.Attempt != 2 || e.Dir != filepath.Join("runs", plain, "b1-try2") ||
		len(e.Superseded) != 1 || e.Superseded[0].Dir != filepath.Join("runs", plain, "b1") || e.Superseded[0].Status != results.VerdictClientLimited {
		t.Errorf("plain b1 journaled: %+v; want ok, attempt 2 in its own directory, the first attempt superseded", e)
	}
	if e := idx[runKey{taxed, 2}]; e.Status != results.VerdictClientLimited || e.Attempt != 3 || len(e.Superseded) != 2 {
		t.Errorf("taxed b2 journaled: %+v; want the third attempt, client_limited, two superseded", e)
	}
	for _, d := range []string{"b1", "b1-try2"} {
		if _, err := os.Stat(filepath.Join(out, "runs", plain, d, "summary_A.json")); err != nil {
			t.Errorf("attempt %s of plain b1: %v", d, err)
		}
	}
	// The plan and the outcome count the last attempt of each run.
	if o.Verdicts[results.VerdictOK] != 11 || o.Verdicts[results.VerdictClientLimited] != 1 {
		t.Errorf("verdicts %v; want 11 ok and taxed b2's last attempt client_limited", o.Verdicts)
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(report), "3 runs were run again in place, at the same position of the same block, and only their last attempt counts: "+plain+" b1 (client_limited: scripted)") {
		t.Errorf("report.md does not say which runs were run again")
	}
	// Resume with every run journaled measures nothing more.
	g := &scripted{script: allOK}
	if _, err := Resume(context.Background(), out, loopOpts(out, g)); err != nil || len(g.runs) != 0 {
		t.Errorf("resume of the finished sweep measured %v (%v)", g.runs, err)
	}
}
