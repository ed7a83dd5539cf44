package plan

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/matrices"
)

// stopView is the view of a sweep whose journal holds four blocks (a first
// stage of two, a second stage of two) of usable runs with the given
// per-cell ttft_p90 values, keyed "config@rate", and the given budget.
func stopView(t *testing.T, budget time.Duration, vals map[string][4]float64) View {
	t.Helper()
	m, err := matrices.Load("../../testdata/two-configs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m.Repeat.Budget = budget
	v := View{Repeat: m.Repeat, Baseline: m.Baseline, Seed: m.Seed, FailLimit: 3, Dead: map[string]bool{}, Values: map[string]map[int]float64{}}
	for _, c := range m.Cells() {
		v.Cells = append(v.Cells, c.CellInfo)
		x, ok := vals[fmt.Sprintf("%s@%g", c.Config, c.Rate)]
		if !ok {
			t.Fatalf("no values for %s@%g", c.Config, c.Rate)
		}
		v.Values[c.ID] = map[int]float64{}
		for b := 1; b <= len(x); b++ {
			v.Values[c.ID][b] = x[b-1]
		}
	}
	return v
}

// at is v after done complete blocks.
func at(v View, done int) View {
	v.Done = done
	return v
}

// stopAt is the rule's decision after done blocks: the reason, whether it
// stops, whether the stopping rule (not max, budget or dead cells) did.
func stopAt(v View, done int) (string, bool, bool) {
	st := at(v, done).shouldStop()
	if st == nil {
		return "", false, false
	}
	return st.Reason, true, st.ByRule
}

func cellsOf(v View, ids []string) []string {
	var out []string
	for _, id := range ids {
		for _, c := range v.Cells {
			if c.ID == id {
				out = append(out, fmt.Sprintf("%s@%g", c.Config, c.Rate))
			}
		}
	}
	slices.Sort(out)
	return out
}

// cellOf is the id of config@rate in v.
func cellOf(t *testing.T, v View, config string, rate float64) string {
	t.Helper()
	for _, c := range v.Cells {
		if c.Config == config && c.Rate == rate {
			return c.ID
		}
	}
	t.Fatalf("no cell %s@%g", config, rate)
	return ""
}

// TestStoppingRule checks the three ways a sweep stops and the
// only_unconverged plan: both cells of every comparison above target.
func TestStoppingRule(t *testing.T) {
	flat := [4]float64{100, 100.1, 100, 100.1}
	noisy := [4]float64{100, 150, 100, 150}

	s := stopView(t, 0, map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": noisy})
	if reason, stop, _ := stopAt(s, 1); stop {
		t.Errorf("stopped before repeat.min: %s", reason)
	}
	if reason, stop, _ := stopAt(s, 2); stop {
		t.Errorf("stopped with x@2 unconverged: %s", reason)
	}
	if got, want := cellsOf(s, s.unconverged()), []string{"plain@2", "x@2"}; !slices.Equal(got, want) {
		t.Errorf("unconverged = %v, want %v", got, want)
	}
	if got, want := cellsOf(s, s.unconvergedWithBaselines()), []string{"plain@2", "x@2"}; !slices.Equal(got, want) {
		t.Errorf("only_unconverged block = %v, want %v (the cell and its baseline, so pairing holds)", got, want)
	}
	// Next plans that block: only the unconverged cells, in the design's
	// order, once the second stage's minimum has run.
	if blk, st := Next(at(s, 4)); st != nil || blk.Block != 5 || blk.Seed != BlockSeed(s.Seed, 5) ||
		!slices.Equal(cellsOf(s, blk.Order), []string{"plain@2", "x@2"}) {
		t.Errorf("Next after 4 blocks = %+v, %+v; want block 5 of plain@2 and x@2", blk, st)
	}
	if blk, _ := Next(at(s, 2)); blk == nil || len(blk.Order) != 4 {
		t.Errorf("Next after 2 blocks (second stage not yet run) = %+v; want every cell", blk)
	}
	if reason, stop, _ := stopAt(s, 6); !stop || !strings.Contains(reason, "repeat.max = 6") {
		t.Errorf("at max: stop=%v %q", stop, reason)
	}

	conv := stopView(t, 0, map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": flat})
	// Within target after the first stage, but the rule waits for a second
	// stage as long as the first: the CIs of a sweep it ends take their
	// spread from there.
	if reason, stop, byRule := stopAt(conv, 2); stop || byRule {
		t.Errorf("stopped after the first stage alone: %s (by rule %v)", reason, byRule)
	}
	if reason, stop, byRule := stopAt(conv, 4); !stop || !strings.HasPrefix(reason, "converged") || !byRule {
		t.Errorf("all converged after 4 blocks: stop=%v byRule=%v %q", stop, byRule, reason)
	}
	if c := Converge(at(conv, 4), true); !c.Converged || len(c.CompHalf) != 2 || len(c.Unusable) != 0 || len(c.RelHalf) != 4 {
		t.Errorf("Converge after 4 converged blocks = %+v", c)
	}

	// Only runs whose status is ok count (the view holds no value for the
	// others). A run lost in the first stage (x@1's second, saturated or
	// client_limited) moves the stage's end one pair on: after 4 blocks the
	// second stage of that comparison has one pair, no spread, and the rule
	// waits; after 6 it has three and the rule ends the sweep (it used to
	// need two usable pairs among blocks 1–2 and ran such a sweep to
	// repeat.max, calling the comparison "without usable runs").
	sat := stopView(t, 0, map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": flat})
	delete(sat.Values[cellOf(t, sat, "x", 1)], 2)
	if reason, stop, _ := stopAt(sat, 4); stop {
		t.Errorf("stopped with a second stage of one pair: %s", reason)
	}
	if got, want := cellsOf(sat, sat.unconverged()), []string{"plain@1", "x@1"}; !slices.Equal(got, want) {
		t.Errorf("unconverged with a run lost in the first stage = %v, want %v", got, want)
	}
	for id, vals := range sat.Values {
		for b := 5; b <= 6; b++ {
			vals[b] = vals[b-4]
			if vals[b] == 0 {
				vals[b] = 100
			}
		}
		sat.Values[id] = vals
	}
	sat.Repeat.Max = 8
	if _, stop, byRule := stopAt(sat, 6); !stop || !byRule {
		t.Errorf("a comparison with five usable pairs within target: stop=%v byRule=%v", stop, byRule)
	}
	if c := Converge(at(sat, 6), true); !c.Converged || len(c.Unusable) != 0 || len(c.CompHalf) != 2 {
		t.Errorf("Converge with a run lost in the first stage = %+v; want converged, every comparison with a CI", c)
	}
	// One usable pair left: no CI, never converged.
	for b := 1; b <= 6; b++ {
		if b != 4 {
			delete(sat.Values[cellOf(t, sat, "x", 1)], b)
		}
	}
	if reason, stop, _ := stopAt(sat, 6); stop {
		t.Errorf("stopped with a comparison that has one usable pair: %s", reason)
	}
	if c := Converge(at(sat, 6), true); c.Converged || len(c.Unusable) != 1 {
		t.Errorf("Converge with a comparison without a CI = %+v; want not converged, one comparison without usable runs", c)
	}
	// No usable run at all (every run failed): never converged.
	none := stopView(t, 0, map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": flat})
	none.Values = map[string]map[int]float64{}
	if reason, stop, _ := stopAt(none, 4); stop {
		t.Errorf("stopped with no usable run: %s", reason)
	}

	// A pair of blocks that would overrun the budget is not started: after
	// 2 blocks in 40 s another pair takes about 40 s.
	pair := stopView(t, 75*time.Second, map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": noisy})
	pair.Randomize, pair.Elapsed = true, 40*time.Second
	if reason, stop, _ := stopAt(pair, 2); !stop || !strings.Contains(reason, "would not finish") {
		t.Errorf("pair overrunning the budget: stop=%v %q", stop, reason)
	}
	pair.Repeat.Budget = 90 * time.Second
	if reason, stop, _ := stopAt(pair, 2); stop {
		t.Errorf("a pair fits in the budget, x@2 unconverged, yet stopped: %s", reason)
	}

	bud := stopView(t, time.Second, map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": noisy})
	bud.Elapsed = time.Minute
	if reason, stop, byRule := stopAt(bud, 2); !stop || !strings.Contains(reason, "budget") || byRule {
		t.Errorf("budget spent: stop=%v byRule=%v %q", stop, byRule, reason)
	}

	// Every cell given up: the sweep stops, nothing converged.
	dead := stopView(t, 0, map[string][4]float64{"plain@1": flat, "plain@2": flat, "x@1": flat, "x@2": noisy})
	for _, c := range dead.Cells {
		dead.Dead[c.ID] = true
	}
	if reason, stop, _ := stopAt(dead, 2); !stop || !strings.Contains(reason, "given up") {
		t.Errorf("every cell given up: stop=%v %q", stop, reason)
	}
}
