package plan

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/stats"
)

// View is what the plan reads of a fixed-rate sweep after Done complete
// blocks: the method, the cells, the clock, the cells given up, and the
// stored primary-metric value of every usable run. It holds values, not
// files: whoever builds it reads them once.
type View struct {
	Repeat    matrices.Repeat
	Baseline  string
	Seed      int64
	Randomize bool
	// Stage1 is the number of first-stage blocks as sweep.json records it;
	// 0 (a sweep recorded before the two-stage rule) means Repeat.Min.
	Stage1 int
	Cells  []results.CellInfo
	// Done is the number of complete blocks.
	Done int
	// Elapsed is the time since the sweep was created.
	Elapsed time.Duration
	// Dead is the set of cells given up after FailLimit consecutive failed
	// runs.
	Dead      map[string]bool
	FailLimit int
	// Values maps a cell id to block → the primary metric (Repeat.Metric)
	// of its usable runs only (verdict ok: only those are results).
	Values map[string]map[int]float64
	// Positions maps a cell id to block → its 1-based position in the
	// block's order, as sweep.json records the blocks: the report fits the
	// position effect from them, and so does the rule.
	Positions map[string]map[int]int
}

// Stop is why a sweep stops.
type Stop struct {
	Reason string
	// ByRule: the stopping rule on the comparisons ended the sweep (not
	// repeat.max, the budget or dead cells): every primary CI the report
	// prints is within target.
	ByRule bool
}

// Next is the plan's decision after v.Done complete blocks: the next block
// to run, or why the sweep stops. The block's order is the design's row for
// it over every cell; an only_unconverged block keeps that order for the
// cells it runs.
func Next(v View) (*Block, *Stop) {
	if st := v.shouldStop(); st != nil {
		return nil, st
	}
	b := v.Done + 1
	order := BlockOrder(v.Seed, b, v.cellIDs(), v.Randomize)
	if v.Repeat.OnlyUnconverged && b > ruleMinBlocks(v.FirstStage()) {
		keep := map[string]bool{}
		for _, id := range v.unconvergedWithBaselines() {
			keep[id] = true
		}
		order = slices.DeleteFunc(order, func(id string) bool { return !keep[id] })
	}
	return &Block{Block: b, Seed: BlockSeed(v.Seed, b), Order: order}, nil
}

// shouldStop applies the stopping rule after v.Done complete blocks: never
// before repeat.min; always at repeat.max or when the budget is spent; in
// between, after a complete pair of mirror-image blocks and at least
// ruleMinBlocks, once every paired comparison on the primary metric is
// within repeat.rel_ci twice over: the first stage's Stein projection (the
// plan), and the CI the report will print when the rule ends the sweep
// (results.CompareAdjusted: the second stage's spread, the position
// effect fitted as the report fits it). nil: go on.
func (v View) shouldStop() *Stop {
	rep, done := v.Repeat, v.Done
	if done < max(rep.Min, 1) {
		return nil
	}
	if done >= rep.Max {
		return &Stop{Reason: fmt.Sprintf("reached repeat.max = %d blocks", rep.Max)}
	}
	elapsed := v.Elapsed
	if rep.Budget > 0 && elapsed >= rep.Budget {
		return &Stop{Reason: fmt.Sprintf("time budget of %s spent after %d blocks", rep.Budget, done)}
	}
	if len(v.Dead) == len(v.Cells) {
		return &Stop{Reason: fmt.Sprintf("every cell failed %d runs in a row and was given up after %d blocks: nothing converged", v.FailLimit, done)}
	}
	if rep.Budget > 0 && v.Randomize && done%2 == 0 && elapsed+2*elapsed/time.Duration(done) > rep.Budget {
		return &Stop{Reason: fmt.Sprintf("time budget of %s: another pair of blocks (about %s) would not finish within it; stopped after %d blocks, a balanced design",
			rep.Budget, (2 * elapsed / time.Duration(done)).Round(time.Second), done)}
	}
	if done < ruleMinBlocks(v.FirstStage()) || !pairComplete(done, v.Randomize) || len(v.unconverged()) > 0 {
		return nil
	}
	if len(v.primaryComparisons()) == 0 {
		return &Stop{Reason: fmt.Sprintf("converged: every cell's %s has a relative %.0f%% CI half-width ≤ %.1f%% after %d blocks (no comparisons in this sweep)",
			rep.Metric, rep.Confidence*100, rep.RelCI*100, done)}
	}
	return &Stop{ByRule: true, Reason: fmt.Sprintf("converged: every comparison on the primary metric %s has a %.0f%% CI half-width ≤ ±%.1f%% after %d blocks, as the report prints it (its spread from the blocks after the first %d pairs), and the first stage projected as much",
		rep.Metric, rep.Confidence*100, rep.RelCI*100, done, v.FirstStage())}
}

// ruleMinBlocks is the fewest blocks after which the stopping rule may end
// the sweep: the first stage and a second stage at least as long (at least
// two blocks), since the CIs of a sweep the rule ended take their spread from
// the second stage alone (results.MethodSecondStage) and need its degrees of
// freedom.
func ruleMinBlocks(stage1 int) int { return stage1 + max(2, stage1) }

// pairComplete reports whether done blocks end a pair of mirror-image
// blocks (always true for unrandomized orders): the rule looks only there.
func pairComplete(done int, randomize bool) bool { return !randomize || done%2 == 0 }

// withinTarget is the stopping rule's test of one comparison: it has a CI
// (ok) and its half-width, (Hi − Lo)/2 of the printed interval, is at most
// the target.
func withinTarget(half float64, ok bool, target float64) bool { return ok && half <= target }

// pairedCells is one comparison of the sweep: treat against base, named as
// the report names it.
type pairedCells struct {
	name        string
	base, treat string
}

// primaryComparisons lists the comparisons the stopping rule targets: every
// config against the baseline at the same rate and shape, and every A/A
// control against its original.
func (v View) primaryComparisons() []pairedCells {
	var out []pairedCells
	for _, c := range v.Cells {
		for _, b := range v.Cells {
			if b.ID == c.ID || b.Rate != c.Rate || b.Shape != c.Shape || b.SameAs != "" {
				continue
			}
			aa := c.SameAs != "" && (c.SameAs == b.Config || c.SameAs == b.ID)
			main := c.SameAs == "" && c.Config != v.Baseline && b.Config == v.Baseline
			if aa || main {
				out = append(out, pairedCells{fmt.Sprintf("%s vs %s @ %g %s", c.Config, b.Config, c.Rate, c.Shape), b.ID, c.ID})
			}
		}
	}
	return out
}

// half is the half-width (a fraction, (Hi − Lo)/2) of the CI the report
// prints of one comparison on the primary metric over the usable runs, with
// spread sp (the second stage's if the rule ends the sweep now, else every
// block's) and the position effect nu. ok is false when it has no such CI
// (fewer than two paired usable blocks, or no spread of the kind asked for).
func (v View) half(p pairedCells, nu results.Nuisance, sp results.Spread) (float64, bool) {
	c := results.CompareAdjusted(v.Values[p.base], v.Values[p.treat], v.dpos(p), nu, sp, v.Repeat.Confidence)
	if c.N < 2 || sp.Method != "" && c.Method != sp.Method {
		return math.NaN(), false
	}
	return (c.Hi - c.Lo) / 2, true
}

// secondStage is the spread of a sweep the rule ends: the blocks after the
// first stage.
func (v View) secondStage() results.Spread {
	return results.Spread{Method: results.MethodSecondStage, Stage1: v.FirstStage()}
}

// projected reports whether the first stage's Stein projection of one
// comparison (its spread over all the paired blocks) is within target: the
// rule ends the sweep on a comparison only then.
func (v View) projected(p pairedCells) bool {
	proj := results.CompareTwoStage(v.Values[p.base], v.Values[p.treat], v.FirstStage(), v.Repeat.Confidence)
	return proj.Method == results.MethodTwoStage && (proj.Hi-proj.Lo)/2 <= v.Repeat.RelCI
}

// dpos is block → the position of p's treat cell minus its base cell's, in
// the blocks both have.
func (v View) dpos(p pairedCells) map[int]float64 {
	base, treat := v.Values[p.base], v.Values[p.treat]
	out := map[int]float64{}
	for b := range treat {
		if _, both := base[b]; both {
			out[b] = float64(v.Positions[p.treat][b] - v.Positions[p.base][b])
		}
	}
	return out
}

// nuisance is the position effect on the primary metric, fitted over every
// usable run as the report fits it (results.EstimatePosition over 0-based
// positions); none without recorded positions.
func (v View) nuisance() results.Nuisance {
	var obs []results.Obs
	for id, vals := range v.Values {
		for b, x := range vals {
			if pos := v.Positions[id][b]; pos > 0 {
				obs = append(obs, results.Obs{Cell: id, Block: b, Position: pos - 1, Value: x})
			}
		}
	}
	slices.SortFunc(obs, func(a, b results.Obs) int { // the fit's sums in one order, whatever the maps'
		return cmp.Or(strings.Compare(a.Cell, b.Cell), a.Block-b.Block)
	})
	return results.EstimatePosition(obs, v.Repeat.Confidence)
}

// FirstStage is the number of first-stage blocks of v's sweep.
func (v View) FirstStage() int {
	if v.Stage1 > 0 {
		return v.Stage1
	}
	return v.Repeat.Min
}

func (v View) cellIDs() []string {
	ids := make([]string, len(v.Cells))
	for i, c := range v.Cells {
		ids[i] = c.ID
	}
	return ids
}

// unconverged lists the cells of comparisons whose primary-metric CI is not
// yet within target (a comparison without usable runs never is). Without
// comparisons it falls back to each cell's own relative CI.
func (v View) unconverged() []string {
	comps := v.primaryComparisons()
	seen := map[string]bool{}
	var out []string
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	nu := v.nuisance()
	for _, p := range comps {
		if h, ok := v.half(p, nu, v.secondStage()); !withinTarget(h, ok, v.Repeat.RelCI) || !v.projected(p) {
			add(p.treat)
			add(p.base)
		}
	}
	if len(comps) == 0 {
		for _, c := range v.Cells {
			if ok, _ := v.cellConverged(c.ID); !ok {
				add(c.ID)
			}
		}
	}
	return out
}

func (v View) cellConverged(id string) (bool, float64) {
	vals := slices.Collect(maps.Values(v.Values[id]))
	if len(vals) < 2 {
		return false, math.NaN()
	}
	return stats.Converged(vals, v.Repeat.RelCI, v.Repeat.Confidence)
}

// unconvergedWithBaselines is the cell set of an only_unconverged block: both
// cells of every comparison still above target, so every comparison stays
// paired. Cells marked failed are left out: more runs will not help.
func (v View) unconvergedWithBaselines() []string {
	return slices.DeleteFunc(v.unconverged(), func(id string) bool { return v.Dead[id] })
}

// Convergence is how close a sweep came to its target when it stopped,
// as sweep.json's stop record keeps it.
type Convergence struct {
	// RelHalf is each cell's relative CI half-width on the primary metric
	// (cells with at least two usable runs).
	RelHalf map[string]float64
	// CompHalf is the half-width (a fraction) of every paired comparison's
	// CI as the report prints it for this stop, keyed "config vs baseline @
	// rate shape".
	CompHalf map[string]float64
	// Unusable names the comparisons without a CI.
	Unusable []string
	// Converged: every comparison (without comparisons, every cell) is
	// within target.
	Converged bool
}

// Converge measures v against its target with the CIs the report prints
// when the sweep stops so: byRule (the stopping rule ended it) their spread
// from the second stage, else from every block.
func Converge(v View, byRule bool) Convergence {
	c := Convergence{RelHalf: map[string]float64{}, CompHalf: map[string]float64{}}
	for _, cell := range v.Cells {
		if _, rh := v.cellConverged(cell.ID); !math.IsNaN(rh) {
			c.RelHalf[cell.ID] = rh
		}
	}
	comps := v.primaryComparisons()
	conv := true
	nu := v.nuisance()
	sp := results.Spread{} // every block
	if byRule {
		sp = v.secondStage()
	}
	for _, p := range comps {
		h, ok := v.half(p, nu, sp)
		if !ok {
			c.Unusable = append(c.Unusable, p.name)
			conv = false
			continue
		}
		c.CompHalf[p.name] = h
		conv = conv && h <= v.Repeat.RelCI
	}
	if len(comps) == 0 {
		for _, cell := range v.Cells {
			ok, _ := v.cellConverged(cell.ID)
			conv = conv && ok
		}
	}
	c.Converged = conv
	return c
}
