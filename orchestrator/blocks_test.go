package orchestrator

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/results"
)

const stopMatrix = `name: stop
seed: 3
engine: {kind: sim}
configs:
  plain: {}
  x: {sim: {connector: constant, connector_us: 16}}
rates: [1, 2]
shapes: [{name: s, input: 8, output: 2}]
measure: {min_completed: 10}
repeat: {min: 2, max: 6, metric: ttft_p90, rel_ci: 0.05, confidence: 0.95, only_unconverged: true%BUDGET%}
baseline: plain
`

// stopSweep builds a sweep whose journal holds four blocks (a first stage
// of two, a second stage of two) with the given per-cell ttft_p90 values,
// keyed "config@rate".
func stopSweep(t *testing.T, budget string, vals map[string][4]float64) *Sweep {
	t.Helper()
	m, err := matrices.Parse("stop.yaml", []byte(strings.Replace(stopMatrix, "%BUDGET%", budget, 1)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := newSweep(m, dir, Options{})
	s.state = &SweepState{Seed: m.Seed, Cells: cellRecords(m), Created: time.Now()}
	s.ledger = newLedger(dir, 3)
	for _, c := range s.state.Cells {
		v, ok := vals[fmt.Sprintf("%s@%g", c.Config, c.Rate)]
		if !ok {
			t.Fatalf("no values for %s@%g", c.Config, c.Rate)
		}
		for b := 1; b <= len(v); b++ {
			rel := filepath.Join("runs", c.ID, fmt.Sprintf("b%d", b))
			if err := os.MkdirAll(filepath.Join(dir, rel), 0o755); err != nil {
				t.Fatal(err)
			}
			p90 := v[b-1]
			if err := results.WriteRunSummary(filepath.Join(dir, rel, "summary_A.json"), &results.RunSummary{Cell: c.ID, Block: b, P90TTFTMs: &p90}); err != nil {
				t.Fatal(err)
			}
			s.ledger.runs[runKey{c.ID, b}] = JournalEntry{Cell: c.ID, Block: b, Status: "ok", Dir: rel}
		}
	}
	return s
}

func cellsOf(s *Sweep, ids []string) []string {
	var out []string
	for _, id := range ids {
		c := s.cellRecord(id)
		out = append(out, fmt.Sprintf("%s@%g", c.Config, c.Rate))
	}
	slices.Sort(out)
	return out
}

// TestStoppingRule checks the three ways a sweep stops and the
// only_unconverged plan: both cells of every comparison above target.
func TestStoppingRule(t *testing.T) {
	flat := [4]float64{100, 100.1, 100, 100.1}
	noisy := [4]float64{100, 150, 100, 150}

	s := stopSweep(t, "", map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": noisy})
	if reason, stop := s.shouldStop(1); stop {
		t.Errorf("stopped before repeat.min: %s", reason)
	}
	if reason, stop := s.shouldStop(2); stop {
		t.Errorf("stopped with x@2 unconverged: %s", reason)
	}
	if got, want := cellsOf(s, s.unconverged()), []string{"plain@2", "x@2"}; !slices.Equal(got, want) {
		t.Errorf("unconverged = %v, want %v", got, want)
	}
	if got, want := cellsOf(s, s.unconvergedWithBaselines()), []string{"plain@2", "x@2"}; !slices.Equal(got, want) {
		t.Errorf("only_unconverged block = %v, want %v (the cell and its baseline, so pairing holds)", got, want)
	}
	if reason, stop := s.shouldStop(6); !stop || !strings.Contains(reason, "repeat.max = 6") {
		t.Errorf("at max: stop=%v %q", stop, reason)
	}

	conv := stopSweep(t, "", map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": flat})
	// Within target after the first stage, but the rule waits for a second
	// stage as long as the first: the CIs of a sweep it ends take their
	// spread from there.
	if reason, stop := conv.shouldStop(2); stop {
		t.Errorf("stopped after the first stage alone: %s", reason)
	}
	if conv.ruleStop {
		t.Error("ruleStop set without a stop")
	}
	if reason, stop := conv.shouldStop(4); !stop || !strings.HasPrefix(reason, "converged") || !conv.ruleStop {
		t.Errorf("all converged after 4 blocks: stop=%v ruleStop=%v %q", stop, conv.ruleStop, reason)
	}

	// Only runs whose status is ok count: with x@1's second run saturated
	// its comparison has one usable first-stage pair, no CI, and is never
	// converged.
	sat := stopSweep(t, "", map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": flat})
	for k, e := range sat.ledger.runs {
		if c := sat.cellRecord(k.cell); c.Config == "x" && c.Rate == 1 && k.block == 2 {
			e.Status = "saturated"
			sat.ledger.runs[k] = e
		}
	}
	if reason, stop := sat.shouldStop(4); stop {
		t.Errorf("stopped with a comparison that has one usable first-stage pair: %s", reason)
	}
	if got, want := cellsOf(sat, sat.unconverged()), []string{"plain@1", "x@1"}; !slices.Equal(got, want) {
		t.Errorf("unconverged with a saturated run = %v, want %v", got, want)
	}
	// No usable run at all (every run failed): never converged.
	none := stopSweep(t, "", map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": flat})
	for k, e := range none.ledger.runs {
		e.Status = "failed"
		none.ledger.runs[k] = e
	}
	if reason, stop := none.shouldStop(4); stop {
		t.Errorf("stopped with no usable run: %s", reason)
	}

	// A pair of blocks that would overrun the budget is not started: after
	// 2 blocks in 40 s another pair takes about 40 s.
	pair := stopSweep(t, ", budget: 75s", map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": noisy})
	pair.state.Randomize, pair.state.Created = true, time.Now().Add(-40*time.Second)
	if reason, stop := pair.shouldStop(2); !stop || !strings.Contains(reason, "would not finish") {
		t.Errorf("pair overrunning the budget: stop=%v %q", stop, reason)
	}
	pair.m.Repeat.Budget = 90 * time.Second
	if reason, stop := pair.shouldStop(2); stop {
		t.Errorf("a pair fits in the budget, x@2 unconverged, yet stopped: %s", reason)
	}

	bud := stopSweep(t, ", budget: 1s", map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": noisy})
	bud.state.Created = time.Now().Add(-time.Minute)
	if reason, stop := bud.shouldStop(2); !stop || !strings.Contains(reason, "budget") {
		t.Errorf("budget spent: stop=%v %q", stop, reason)
	}
}
