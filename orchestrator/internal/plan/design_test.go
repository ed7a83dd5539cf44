package plan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/stats"
)

// The method checked over many seeds at the statistics level:
// synthetic per-run values with a block effect, a drift through each block,
// a cold first run, run noise and a known tax, run in the orders BlockOrder
// plans, stopped by the stopping rule's own test (pairComplete,
// withinTarget on two-stage half-widths), and compared as the report
// compares them (results.EstimatePosition, results.CompareAdjusted). No
// seed is chosen: the error rates are asserted.

// world is the truth the synthetic sweeps are drawn from.
type world struct {
	blockSD, runSD float64 // log-scale block-shared and per-run noise
	drift          float64 // log-scale slowdown per position in the block
	cold           float64 // log-scale slowdown of a block's first run
	tax            float64 // true log effect of the taxed config
}

// synthCell is a cell of the synthetic sweep and its true log level.
type synthCell struct {
	id, base string // base: the cell it is compared with ("" for plain)
	level    float64
}

func synthCells(tax float64) []synthCell {
	var cs []synthCell
	for _, r := range []string{"r1", "r2"} {
		lvl := map[string]float64{"r1": math.Log(10), "r2": math.Log(25)}[r]
		cs = append(cs,
			synthCell{"plain@" + r, "", lvl},
			synthCell{"aa@" + r, "plain@" + r, lvl},
			synthCell{"noop@" + r, "plain@" + r, lvl},
			synthCell{"taxed@" + r, "plain@" + r, lvl + tax})
	}
	return cs
}

// sweepOutcome is one synthetic sweep: its comparisons on the primary
// metric when it stopped, and how many blocks it ran.
type sweepOutcome struct {
	blocks int
	early  bool
	comps  map[string]results.Comparison // treat cell → comparison
	naive  map[string]results.Comparison // ordinary paired t at the same stop
	stein  map[string]results.Comparison // the first stage's (Stein) CI at the same stop, for contrast
}

// synthSweep runs one sweep of the rule: blocks in BlockOrder's orders,
// stopping after complete pairs of blocks, no earlier than ruleMinBlocks
// (stage1 + max(2, stage1)), once every comparison's two-stage half-width is
// within target, at the latest after maxBlocks; a sweep the rule ended is
// compared with the second stage's spread, any other with every block's.
func synthSweep(seed int64, w world, stage1, maxBlocks int, target float64, randomize bool) sweepOutcome {
	cells := synthCells(w.tax)
	ids := make([]string, len(cells))
	for i, c := range cells {
		ids[i] = c.id
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	vals := map[string]map[int]float64{}
	pos := map[string]map[int]int{}
	for _, c := range cells {
		vals[c.id], pos[c.id] = map[int]float64{}, map[int]int{}
	}
	level := map[string]float64{}
	for _, c := range cells {
		level[c.id] = c.level
	}
	out := sweepOutcome{}
	for b := 1; b <= maxBlocks; b++ {
		be := w.blockSD * rng.NormFloat64()
		for p, id := range BlockOrder(seed, b, ids, randomize) {
			v := level[id] + be + w.drift*float64(p) + w.runSD*rng.NormFloat64()
			if p == 0 {
				v += w.cold
			}
			vals[id][b], pos[id][b] = math.Exp(v), p
		}
		out.blocks = b
		if b < ruleMinBlocks(stage1) || !pairComplete(b, randomize) || b == maxBlocks {
			continue
		}
		all := true
		for _, c := range cells {
			if c.base != "" {
				h, ok := twoStageHalf(results.CompareTwoStage(vals[c.base], vals[c.id], stage1, 0.95))
				all = all && withinTarget(h, ok, target)
			}
		}
		if all {
			out.early = true
			break
		}
	}
	var obs []results.Obs
	for _, c := range cells {
		for b, v := range vals[c.id] {
			obs = append(obs, results.Obs{Cell: c.id, Block: b, Position: pos[c.id][b], Value: v})
		}
	}
	nu := results.EstimatePosition(obs, 0.95)
	out.comps, out.naive, out.stein = map[string]results.Comparison{}, map[string]results.Comparison{}, map[string]results.Comparison{}
	for _, c := range cells {
		if c.base == "" {
			continue
		}
		dpos := map[int]float64{}
		for b := range vals[c.id] {
			dpos[b] = float64(pos[c.id][b] - pos[c.base][b])
		}
		sp := results.Spread{}
		if out.early {
			sp = results.Spread{Method: results.MethodSecondStage, Stage1: stage1}
		}
		out.comps[c.id] = results.CompareAdjusted(vals[c.base], vals[c.id], dpos, nu, sp, 0.95)
		out.naive[c.id] = results.Compare(vals[c.base], vals[c.id], 0.95)
		out.stein[c.id] = results.CompareAdjusted(vals[c.base], vals[c.id], dpos, nu, results.Spread{Method: results.MethodTwoStage, Stage1: stage1}, 0.95)
	}
	return out
}

// significantRaw: the comparison alone (before Holm) shows an effect.
func significantRaw(c results.Comparison) bool {
	return c.N >= 2 && c.P < 0.05 && (c.Lo > 0 || c.Hi < 0)
}

// TestDesignErrorRates asserts, over many seeds with a drift through every
// block and a cold first run, for a tight and a loose target: the A/A (and a
// +0.16% noop) false-positive rate per comparison is not above α, over all
// sweeps and among the sweeps the rule stopped early (whose CIs take their
// spread from the second stage); the known tax's CI covers the truth at the
// nominal 95% and the tax is found. For contrast it reports what the first
// stage's own (Stein) CI would have said at the same early stops: above α,
// since a quiet first stage is what stopped them.
func TestDesignErrorRates(t *testing.T) {
	const seeds, stage1, maxBlocks = 1000, 4, 12
	w := world{blockSD: 0.04, runSD: 0.03, drift: 0.02, cold: 0.08, tax: math.Log(1.25)}
	// notAbove: k false positives in n are consistent with a rate ≤ α (the
	// one-sided binomial p of k or more at α is above 0.001).
	notAbove := func(what string, k, n int) {
		t.Helper()
		if p := stats.BinomialTail(k, n, 0.05); p < 0.001 {
			t.Errorf("%s: %d false positives in %d comparisons (%.1f%%) is above α = 5%% (one-sided binomial p = %.2g)", what, k, n, 100*float64(k)/float64(n), p)
		}
	}
	for _, target := range []float64{0.10, 0.15} {
		var aaN, aaFP, taxN, taxCover, taxFound, early, earlyFP, earlySteinFP, earlyN int
		for seed := int64(1); seed <= seeds; seed++ {
			o := synthSweep(seed, w, stage1, maxBlocks, target, true)
			for id, c := range o.comps {
				switch id[:2] {
				case "aa", "no":
					aaN++
					if significantRaw(c) {
						aaFP++
					}
					if o.early {
						earlyN++
						if significantRaw(c) {
							earlyFP++
						}
						if significantRaw(o.stein[id]) {
							earlySteinFP++
						}
					}
				case "ta":
					taxN++
					if c.Lo <= 0.25 && 0.25 <= c.Hi {
						taxCover++
					}
					if significantRaw(c) && c.Effect > 0 {
						taxFound++
					}
				}
			}
			if o.early {
				early++
			}
		}
		rate := func(k, n int) float64 { return 100 * float64(k) / float64(max(n, 1)) }
		t.Logf("target ±%.0f%%, %d sweeps (drift +2%%/position, cold first run +8%%): A/A and noop false positives %d/%d = %.1f%%; tax +25%% found %.1f%%, CI covers it %.1f%%; %d sweeps stopped early by the rule: false positives %.1f%% (second-stage spread) where the first stage's own CI would give %.1f%%",
			100*target, seeds, aaFP, aaN, rate(aaFP, aaN), rate(taxFound, taxN), rate(taxCover, taxN), early, rate(earlyFP, earlyN), rate(earlySteinFP, earlyN))
		notAbove(fmt.Sprintf("target %.2f, all sweeps", target), aaFP, aaN)
		notAbove(fmt.Sprintf("target %.2f, sweeps stopped early", target), earlyFP, earlyN)
		if r := rate(taxCover, taxN); r < 93 {
			t.Errorf("target %.2f: tax CI coverage %.1f%% < 93%% (nominal 95%%)", target, r)
		}
		if r := rate(taxFound, taxN); r < 90 {
			t.Errorf("target %.2f: a +25%% tax found in %.1f%% of sweeps, want ≥ 90%%", target, r)
		}
		if early < seeds/10 || early == seeds {
			t.Errorf("target %.2f: %d of %d sweeps stopped early: the check needs both early and late stops", target, early, seeds)
		}
	}
}

// TestDesignOrderMatters shows what the design is for: with the cells in
// the same order in every block (seed 000), the drift makes the A/A pair
// "significant" far more often than α; with the Williams orders it does not.
func TestDesignOrderMatters(t *testing.T) {
	const seeds = 300
	w := world{blockSD: 0.04, runSD: 0.03, drift: 0.05}
	count := func(randomize bool) float64 {
		fp, n := 0, 0
		for seed := int64(1); seed <= seeds; seed++ {
			o := synthSweep(seed, w, 4, 4, 0, randomize)
			for id, c := range o.naive {
				if id[:2] == "aa" {
					n++
					if significantRaw(c) {
						fp++
					}
				}
			}
		}
		return float64(fp) / float64(n)
	}
	fixed, williams := count(false), count(true)
	t.Logf("A/A false positives over %d sweeps of 4 blocks, drift +5%%/position: fixed order %.1f%%, Williams orders %.1f%%", seeds, 100*fixed, 100*williams)
	if fixed < 0.25 {
		t.Errorf("fixed order: %.3f; the drift should make the A/A pair significant in most sweeps", fixed)
	}
	if williams > 0.05 {
		t.Errorf("Williams orders: A/A false-positive rate %.3f > 0.05", williams)
	}

	// An odd number of blocks cannot balance. With orders that vary, the
	// drift shows up as extra noise (the unadjusted test is conservative and
	// loses power); with the position effect taken out the comparisons are
	// back at the nominal rate. 1,200 comparisons: the binomial SE at 5% is
	// 0.63 points.
	raw, adj, n := 0, 0, 0
	for seed := int64(1); seed <= seeds; seed++ {
		o := synthSweep(seed, w, 3, 3, 0, true)
		for id, c := range o.comps {
			if id[:2] == "aa" || id[:2] == "no" {
				n++
				if significantRaw(o.naive[id]) {
					raw++
				}
				if significantRaw(c) {
					adj++
				}
			}
		}
	}
	t.Logf("3 blocks (unbalanced), drift +5%%/position: A/A and noop false positives %.1f%% unadjusted (the drift counted as noise), %.1f%% with the position effect taken out",
		100*float64(raw)/float64(n), 100*float64(adj)/float64(n))
	if r := float64(adj) / float64(n); r > 0.065 {
		t.Errorf("3 blocks, position-adjusted: false-positive rate %.3f, want about 0.05", r)
	}
}

func TestWilliamsBalance(t *testing.T) {
	for n := 2; n <= 9; n++ {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("c%d", i)
		}
		p := WilliamsPeriod(n)
		var orders [][]string
		for b := 1; b <= 2*p; b++ {
			o := BlockOrder(42, b, ids, true)
			orders = append(orders, o)
			if b%2 == 0 {
				if bal := MeasureBalance(orders, n); !bal.Balanced {
					t.Errorf("n=%d after %d blocks: %s", n, b, bal.Words)
				}
			}
			if b == p {
				// A whole square: every cell in every position once (twice for
				// odd n, whose square has 2n rows) and every ordered neighbour
				// pair once (twice).
				bal := MeasureBalance(orders, n)
				if bal.CarryoverSeen != n*(n-1) {
					t.Errorf("n=%d whole square: %d of %d neighbour pairs", n, bal.CarryoverSeen, n*(n-1))
				}
				cnt := map[[2]string]int{}
				for _, o := range orders {
					for i, c := range o {
						cnt[[2]string{c, fmt.Sprint(i)}]++
					}
				}
				for _, c := range ids {
					for i := 0; i < n; i++ {
						if got := cnt[[2]string{c, fmt.Sprint(i)}]; got != p/n {
							t.Errorf("n=%d: %s in position %d %d times, want %d", n, c, i, got, p/n)
						}
					}
				}
			}
		}
		if bal := MeasureBalance(orders[:3], n); n > 2 && bal.Balanced {
			t.Errorf("n=%d: 3 blocks reported balanced", n)
		}
	}
	// Seeded: the same seed gives the same orders, another seed others.
	a, b := BlockOrder(1, 3, []string{"a", "b", "c", "d"}, true), BlockOrder(1, 3, []string{"a", "b", "c", "d"}, true)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("not deterministic: %v vs %v", a, b)
	}
	diff := false
	for s := int64(2); s < 10 && !diff; s++ {
		diff = fmt.Sprint(BlockOrder(s, 3, []string{"a", "b", "c", "d"}, true)) != fmt.Sprint(a)
	}
	if !diff {
		t.Error("the seed does not change the orders")
	}
}
