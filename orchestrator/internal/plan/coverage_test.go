package plan

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/results"
)

// pairedModel is a two-config synthetic engine for the coverage of the
// capacity search's intervals: every config's metric at rate r is its
// curve times a block factor shared by both configs in a block (the
// machine's state, which pairing cancels) and run noise, both lognormal.
// Its true capacities are known exactly: where the noise-free curve crosses
// the limit (the median run's crossing).
type pairedModel struct {
	name string
	// run is one run of config cfg at rate r in a block with factor zb
	// (a standard normal draw shared by the block's runs).
	run   func(cfg string, r, zb float64, rng *rand.Rand) (results.Verdict, float64)
	truth map[string]float64
	// flaky is the share of runs graded out (client-limited): they say
	// nothing about the SLO, and the search re-runs their blocks.
	flaky float64
}

// smoothModel: an M/M/1-like curve base/(1 − r/K), saturated from 0.97·K;
// capacity K·(1 − base/limit).
func smoothModel(limit float64) pairedModel {
	const base, sb, sr = 10.0, 0.05, 0.05
	k := map[string]float64{"plain": 150, "taxed": 120}
	m := pairedModel{name: "smooth", truth: map[string]float64{}}
	for c, kc := range k {
		m.truth[c] = kc * (1 - base/limit)
	}
	m.run = func(cfg string, r, zb float64, rng *rand.Rand) (results.Verdict, float64) {
		if r >= 0.97*k[cfg] {
			return results.VerdictSaturated, math.NaN()
		}
		return results.VerdictOK, base / (1 - r/k[cfg]) * math.Exp(sb*zb+sr*rng.NormFloat64())
	}
	return m
}

// kneeModel: flat at a third of the limit up to a knee, saturated beyond
// it; the knee moves with the block (3%) and the run (1%); capacity the
// median knee. Only saturation crosses the limit: every probe's blocks
// either hold or saturate, which is where the midpoint of shared probes
// gave every block the same crossing.
func kneeModel(limit float64) pairedModel {
	const sb, sr = 0.03, 0.01
	k := map[string]float64{"plain": 100, "taxed": 80}
	m := pairedModel{name: "sharp knee", truth: k}
	m.run = func(cfg string, r, zb float64, rng *rand.Rand) (results.Verdict, float64) {
		if r >= k[cfg]*math.Exp(sb*zb+sr*rng.NormFloat64()) {
			return results.VerdictSaturated, math.NaN()
		}
		return results.VerdictOK, limit / 3 * math.Exp(0.05*rng.NormFloat64())
	}
	return m
}

// searchPaired runs both configs' searches against the model to their end
// and analyses them.
func searchPaired(t *testing.T, c *matrices.Capacity, m pairedModel, rng *rand.Rand) results.CapacityReport {
	t.Helper()
	spec := results.CapacitySpec{Metric: c.Metric, MaxMs: c.MaxMs, Lo: c.Lo, Hi: c.Hi, Tolerance: c.Tolerance,
		Blocks: c.Blocks, Confidence: 0.95, Baseline: "plain", Configs: []string{"plain", "taxed"}, Shapes: []string{"s"}}
	zb := make([]float64, c.Blocks+1)
	for b := range zb {
		zb[b] = rng.NormFloat64()
	}
	var runs []results.CapacityRun
	for round := 0; ; round++ {
		if round > 60 {
			t.Fatal("the search does not end")
		}
		rep := results.AnalyzeCapacity(spec, runs)
		more := false
		for _, s := range rep.Searches {
			next := Retries(&s, c.Retries) // as the sweep does: usable runs first, then the plan
			if len(next) == 0 {
				rates, _ := Search(c, &s)
				for _, r := range rates {
					next = append(next, Retry{Rate: r})
				}
			}
			for _, r := range next {
				more = true
				for b := 1; b <= c.Blocks; b++ {
					if r.Blocks != nil && !slices.Contains(r.Blocks, b) {
						continue
					}
					v, x := m.run(s.Config, r.Rate, zb[b], rng)
					if m.flaky > 0 && rng.Float64() < m.flaky {
						v, x = results.VerdictClientLimited, math.NaN() // a run that says nothing about the SLO
					}
					runs = append(runs, results.CapacityRun{CellInfo: results.CellInfo{Config: s.Config, Shape: "s", Rate: r.Rate, Attempt: r.Attempt}, Block: b, Status: v, Value: x})
				}
			}
		}
		if !more {
			return rep
		}
	}
}

// TestCapacityIntervalsCoverage: over 1,000 searches on each of a smooth
// engine, a sharp-knee engine and the smooth one with 15% of its runs graded
// out (re-run before the plan goes on), the 95% CI of each config's capacity and the paired
// 95% CI of taxed's capacity against plain's each cover the truth in at
// least 93% of searches (a censored crossing enters as its whole bracket,
// so an interval may cover more often than 95%, never much less). The test
// logs the coverage that the t-CI of the blocks' points (interpolations and
// midpoints: the former method) had on the same searches.
func TestCapacityIntervalsCoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 simulated searches")
	}
	const n, want = 1000, 0.93
	c := &matrices.Capacity{Metric: "ttft_p90", MaxMs: 30, Lo: 40, Hi: 160, Tolerance: 0.05, Blocks: 3, MaxProbes: 14, Expand: 4, Retries: 2}
	flaky := smoothModel(c.MaxMs)
	flaky.name, flaky.flaky = "smooth, 15% of runs client-limited,", 0.15
	for _, m := range []pairedModel{smoothModel(c.MaxMs), kneeModel(c.MaxMs), flaky} {
		ratio := m.truth["taxed"]/m.truth["plain"] - 1
		var estCov, pairCov, oldPair, done, widthSum, oldWidth float64
		for seed := range n {
			rep := searchPaired(t, c, m, rand.New(rand.NewPCG(uint64(seed), 7)))
			p, tx := rep.Search("plain", "s"), rep.Search("taxed", "s")
			cmp := rep.Comparisons[0].Comparison
			if p.Estimate == nil || tx.Estimate == nil || cmp.N < 2 {
				continue
			}
			done++
			for _, s := range []*results.CapacitySearch{p, tx} {
				if *s.EstLo <= m.truth[s.Config] && m.truth[s.Config] <= *s.EstHi {
					estCov += 0.5
				}
			}
			if cmp.Lo <= ratio && ratio <= cmp.Hi {
				pairCov++
			}
			widthSum += cmp.Hi - cmp.Lo
			old := results.Compare(p.PerBlock, tx.PerBlock, 0.95)
			if old.Lo <= ratio && ratio <= old.Hi {
				oldPair++
			}
			oldWidth += old.Hi - old.Lo
		}
		t.Logf("%s engine: %d/%d searches bracketed both; the estimates' CIs covered the truth in %.1f%%, the paired CI in %.1f%% (mean width %.1f points; the former point t-CI: %.1f%%, mean width %.1f points)",
			m.name, int(done), n, 100*estCov/done, 100*pairCov/done, 100*widthSum/done, 100*oldPair/done, 100*oldWidth/done)
		if done < n*0.95 {
			t.Errorf("%s: only %d of %d searches bracketed both configs in every block", m.name, int(done), n)
		}
		if estCov/done < want || pairCov/done < want {
			t.Errorf("%s: coverage %.3f (estimates) and %.3f (paired), want ≥ %.2f for nominal 95%% intervals", m.name, estCov/done, pairCov/done, want)
		}
	}
}

// TestRetries: a probe's block whose run said nothing about the SLO is
// re-run, in that block only, until a run counts or the retries are spent;
// the re-run round holds only the blocks it needs.
func TestRetries(t *testing.T) {
	spec := results.CapacitySpec{Metric: "ttft_p90", MaxMs: 30, Blocks: 3, Confidence: 0.95, Baseline: "plain", Configs: []string{"plain"}, Shapes: []string{"s"}}
	run := func(rate float64, b, attempt int, v results.Verdict) results.CapacityRun {
		x := math.NaN()
		if v == results.VerdictOK {
			x = 10
		}
		return results.CapacityRun{CellInfo: results.CellInfo{Config: "plain", Shape: "s", Rate: rate, Attempt: attempt}, Block: b, Status: v, Value: x}
	}
	runs := []results.CapacityRun{run(10, 1, 0, results.VerdictOK), run(10, 2, 0, results.VerdictClientLimited), run(10, 3, 0, results.VerdictFailed),
		run(20, 1, 0, results.VerdictOK), run(20, 2, 0, results.VerdictSaturated), run(20, 3, 0, results.VerdictOK)}
	retries := func(runs []results.CapacityRun, n int) []Retry {
		rep := results.AnalyzeCapacity(spec, runs)
		return Retries(&rep.Searches[0], n)
	}
	got := retries(runs, 2)
	if len(got) != 1 || got[0].Rate != 10 || got[0].Attempt != 1 || !slices.Equal(got[0].Blocks, []int{2, 3}) {
		t.Fatalf("retries %+v, want rate 10 attempt 1 in blocks 2 and 3", got)
	}
	runs = append(runs, run(10, 2, 1, results.VerdictOK), run(10, 3, 1, results.VerdictErrors))
	if got = retries(runs, 2); len(got) != 1 || got[0].Attempt != 2 || !slices.Equal(got[0].Blocks, []int{3}) {
		t.Fatalf("after one re-run: %+v, want attempt 2 of block 3", got)
	}
	runs = append(runs, run(10, 3, 2, results.VerdictFailed))
	if got = retries(runs, 2); len(got) != 0 {
		t.Errorf("retries spent: %+v, want none", got)
	}
	if got = retries(runs[:6], 0); len(got) != 0 {
		t.Errorf("retries: 0 re-runs nothing, got %+v", got)
	}
	rep := results.AnalyzeCapacity(spec, runs)
	if p := rep.Searches[0].Probes[0]; p.N != 2 || p.Runs[1].Status != results.VerdictOK || p.Runs[1].Attempts != 2 {
		t.Errorf("rate 10 after its re-runs: %d blocks count, block 2 %+v: want block 2's re-run used", p.N, p.Runs[1])
	}
	r := RoundOf(3, []Probe{{Cell: "a", Config: "plain", Shape: "s", Rate: 10, Attempt: 1, Blocks: []int{2}}}, 3, 1, true)
	if len(r.Blocks) != 1 || r.Blocks[0].Block != 2 || !slices.Equal(r.Blocks[0].Order, []string{"a"}) {
		t.Errorf("a re-run round: %+v, want block 2 only", r.Blocks)
	}
}

// TestConcurrencySearch: a search over the requests in flight probes whole
// levels only, and brackets the level where a closed loop's TTFT (flat, then
// rising with the queue beyond the engine's batch) crosses the limit
// between adjacent levels or within the tolerance, covering the true
// crossing in at least 90% of 200 seeded searches.
func TestConcurrencySearch(t *testing.T) {
	c := &matrices.Capacity{Metric: "ttft_p90", MaxMs: 60, Over: matrices.OverConcurrency, Lo: 1, Hi: 16, Tolerance: 0.05,
		Blocks: 3, MaxProbes: 14, Expand: 4, Retries: 2}
	const base, batch, perQueued = 20.0, 24.0, 2.5 // TTFT 20 ms up to 24 in flight, +2.5 ms per request queued beyond
	truth := batch + (c.MaxMs-base)/perQueued      // 40 in flight
	m := pairedModel{name: "closed loop", truth: map[string]float64{"plain": truth, "taxed": truth}}
	m.run = func(_ string, n, zb float64, rng *rand.Rand) (results.Verdict, float64) {
		return results.VerdictOK, (base + perQueued*math.Max(0, n-batch)) * math.Exp(0.03*zb+0.03*rng.NormFloat64())
	}
	covered := 0
	for seed := range 200 {
		rep := searchPaired(t, c, m, rand.New(rand.NewPCG(uint64(seed), 11)))
		s := rep.Search("plain", "s")
		for _, p := range s.Probes {
			if p.Rate != math.Round(p.Rate) || p.Rate < 1 {
				t.Fatalf("seed %d: probed in-flight level %v", seed, p.Rate)
			}
		}
		if s.Lo == nil || s.Hi == nil {
			t.Fatalf("seed %d: no bracket: %s", seed, s.Note)
		}
		if s.BandLo == nil && *s.Hi-*s.Lo > math.Max(1, c.Tolerance**s.Lo) && len(s.Probes) < c.MaxProbes {
			t.Errorf("seed %d: bracket [%v, %v] wider than a level or the tolerance without a band (%s)", seed, *s.Lo, *s.Hi, s.Note)
		}
		if *s.Lo <= truth && truth <= *s.Hi {
			covered++
		}
	}
	t.Logf("closed loop: the interval covered the true %v in flight in %d/200 searches", truth, covered)
	if covered < 180 {
		t.Errorf("covered %d/200, want ≥ 90%%", covered)
	}
}
