package plan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mbench/mbench/internal/longrun"
	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/stats"
)

// The method checked over many seeds at the statistics level:
// synthetic per-run values with a block effect, a drift through each block,
// a cold first run, run noise and a known tax, run in the orders BlockOrder
// plans, stopped by the stopping rule itself (View.shouldStop over the
// values and positions so far), and compared as the report compares them
// (results.EstimatePosition, results.CompareAdjusted). No seed is
// chosen: the error rates are asserted.

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
	cell     results.CellInfo
}

func synthCells(tax float64) []synthCell {
	var cs []synthCell
	for i, r := range []string{"r1", "r2"} {
		lvl := map[string]float64{"r1": math.Log(10), "r2": math.Log(25)}[r]
		rate := float64(i + 1)
		cs = append(cs,
			synthCell{"plain@" + r, "", lvl, results.CellInfo{ID: "plain@" + r, Config: "plain", Rate: rate, Shape: "s"}},
			synthCell{"aa@" + r, "plain@" + r, lvl, results.CellInfo{ID: "aa@" + r, Config: "aa", Rate: rate, Shape: "s", SameAs: "plain"}},
			synthCell{"noop@" + r, "plain@" + r, lvl, results.CellInfo{ID: "noop@" + r, Config: "noop", Rate: rate, Shape: "s"}},
			synthCell{"taxed@" + r, "plain@" + r, lvl + tax, results.CellInfo{ID: "taxed@" + r, Config: "taxed", Rate: rate, Shape: "s"}})
	}
	return cs
}

// sweepOutcome is one synthetic sweep: its comparisons on the primary
// metric as the report prints them when it stopped, and how it stopped.
type sweepOutcome struct {
	blocks int
	early  bool                          // the stopping rule ended it
	comps  map[string]results.Comparison // treat cell → the printed comparison
	naive  map[string]results.Comparison // ordinary paired t without the position effect, at the same stop
}

// synthSweep runs one sweep of the rule: blocks in BlockOrder's orders,
// after each the rule's own decision (View.shouldStop with repeat.min
// stage1, repeat.max maxBlocks, target rel_ci), then the comparisons the
// report prints.
func synthSweep(seed int64, w world, stage1, maxBlocks int, target float64, randomize bool) sweepOutcome {
	cells := synthCells(w.tax)
	v := View{Repeat: matrices.Repeat{Min: stage1, Max: maxBlocks, Metric: "ttft_p90", RelCI: target, Confidence: 0.95},
		Baseline: "plain", Seed: seed, Randomize: randomize, Dead: map[string]bool{}, FailLimit: 3,
		Values: map[string]map[int]float64{}, Positions: map[string]map[int]int{}}
	ids := make([]string, len(cells))
	level := map[string]float64{}
	for i, c := range cells {
		ids[i], level[c.id] = c.id, c.level
		v.Cells = append(v.Cells, c.cell)
		v.Values[c.id], v.Positions[c.id] = map[int]float64{}, map[int]int{}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	out := sweepOutcome{}
	for b := 1; ; b++ {
		be := w.blockSD * rng.NormFloat64()
		for p, id := range BlockOrder(seed, b, ids, randomize) {
			x := level[id] + be + w.drift*float64(p) + w.runSD*rng.NormFloat64()
			if p == 0 {
				x += w.cold
			}
			v.Values[id][b], v.Positions[id][b] = math.Exp(x), p+1
		}
		v.Done, out.blocks = b, b
		if st := v.shouldStop(); st != nil {
			out.early = st.ByRule
			break
		}
	}
	nu := v.nuisance()
	out.comps, out.naive = map[string]results.Comparison{}, map[string]results.Comparison{}
	for _, c := range cells {
		if c.base == "" {
			continue
		}
		dpos := map[int]float64{}
		for b := range v.Values[c.id] {
			dpos[b] = float64(v.Positions[c.id][b] - v.Positions[c.base][b])
		}
		sp := results.Spread{}
		if out.early {
			sp = results.Spread{Method: results.MethodSecondStage, Stage1: stage1}
		}
		out.comps[c.id] = results.CompareAdjusted(v.Values[c.base], v.Values[c.id], dpos, nu, sp, 0.95)
		out.naive[c.id] = results.Compare(v.Values[c.base], v.Values[c.id], 0.95)
	}
	return out
}

// significantRaw: the comparison alone (before Holm) shows an effect.
func significantRaw(c results.Comparison) bool {
	return c.N >= 2 && c.P < 0.05 && (c.Lo > 0 || c.Hi < 0)
}

// TestDesignErrorRates asserts, over many seeds, in a world with a drift
// through every block and a cold first run and in a plain one, for tight
// and loose targets and first stages of 2 and 4: every sweep the rule ended
// prints every primary CI within its target (the claim is the printed
// CI); the A/A (and a +0.16% noop) false-positive rate per comparison is
// not above α, over all sweeps and among the sweeps the rule ended; the
// known tax's CI covers the truth at the nominal 95%, and the tax is found.
func TestDesignErrorRates(t *testing.T) {
	const seeds, maxBlocks = 1000, 12
	worlds := []struct {
		name string
		w    world
	}{
		{"drift +2%/position, cold first run +8%", world{blockSD: 0.04, runSD: 0.03, drift: 0.02, cold: 0.08, tax: math.Log(1.25)}},
		{"block and run noise only", world{blockSD: 0.04, runSD: 0.03, tax: math.Log(1.25)}},
	}
	// notAbove: k false positives in n are consistent with a rate ≤ α (the
	// one-sided binomial p of k or more at α is above 0.001).
	notAbove := func(t *testing.T, what string, k, n int) {
		t.Helper()
		if p := stats.BinomialTail(k, n, 0.05); p < 0.001 {
			t.Errorf("%s: %d false positives in %d comparisons (%.1f%%) is above α = 5%% (one-sided binomial p = %.2g)", what, k, n, 100*float64(k)/float64(n), p)
		}
	}
	for _, wd := range worlds {
		for _, stage1 := range []int{2, 4} {
			for _, target := range []float64{0.04, 0.06, 0.10} {
				what := fmt.Sprintf("%s, repeat.min %d, target ±%.0f%%", wd.name, stage1, 100*target)
				// 1,000 sweeps of pure computation each: side by side in a
				// plain run (the cores are otherwise idle), one after
				// another in CI's long run.
				t.Run(what, func(t *testing.T) {
					longrun.Parallel(t)
					var aaN, aaFP, taxN, taxCover, taxFound, early, earlyFP, earlyN, earlyTax, earlyCover, blocks, wide int
					for seed := int64(1); seed <= seeds; seed++ {
						o := synthSweep(seed, wd.w, stage1, maxBlocks, target, true)
						blocks += o.blocks
						for id, c := range o.comps {
							if o.early && (c.Hi-c.Lo)/2 > target+1e-12 {
								wide++
							}
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
								}
							case "ta":
								taxN++
								in := c.Lo <= 0.25 && 0.25 <= c.Hi
								if in {
									taxCover++
								}
								if o.early {
									earlyTax++
									if in {
										earlyCover++
									}
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
					t.Logf("%s: %d sweeps, %.1f blocks on average, %.0f%% ended by the rule; A/A and noop false positives %.1f%% (%.1f%% of those the rule ended); tax +25%% found %.1f%%, CI covers it %.1f%% (%.1f%% where the rule ended the sweep)",
						what, seeds, float64(blocks)/seeds, rate(early, seeds), rate(aaFP, aaN), rate(earlyFP, earlyN), rate(taxFound, taxN), rate(taxCover, taxN), rate(earlyCover, earlyTax))
					if wide > 0 {
						t.Errorf("%s: %d printed primary CIs wider than the target in sweeps the rule ended as converged", what, wide)
					}
					notAbove(t, what+", all sweeps", aaFP, aaN)
					notAbove(t, what+", sweeps the rule ended", earlyFP, earlyN)
					if r := rate(taxCover, taxN); r < 93.5 {
						t.Errorf("%s: tax CI coverage %.1f%% < 93.5%% (nominal 95%%)", what, r)
					}
					if r := rate(taxFound, taxN); r < 90 {
						t.Errorf("%s: a +25%% tax found in %.1f%% of sweeps, want ≥ 90%%", what, r)
					}
				})
			}
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
