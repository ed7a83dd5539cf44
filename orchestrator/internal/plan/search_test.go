package plan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/results"
)

// queueModel is a synthetic engine whose metric at rate r is
// base/(1 − r/mu) times lognormal run noise and a block factor, and which
// saturates beyond 0.97·mu: its capacity at the limit is known exactly.
type queueModel struct {
	base, mu, sigma, sigmaBlock float64
}

func (q queueModel) truth(limit float64) float64 {
	// E[value] = base/(1 − r/mu) · exp((σ² + σ_b²)/2) = limit
	return q.mu * (1 - q.base*math.Exp((q.sigma*q.sigma+q.sigmaBlock*q.sigmaBlock)/2)/limit)
}

// searchModel runs the whole bracketing search against the model: plan,
// run every probe in every block, analyse, until the plan says stop.
func searchModel(t *testing.T, c *matrices.Capacity, q queueModel, rng *rand.Rand) results.CapacitySearch {
	t.Helper()
	spec := results.CapacitySpec{Metric: c.Metric, MaxMs: c.MaxMs, Lo: c.Lo, Hi: c.Hi, Tolerance: c.Tolerance,
		Blocks: c.Blocks, Confidence: 0.95, Baseline: "plain", Configs: []string{"plain"}, Shapes: []string{"s"}}
	block := make([]float64, c.Blocks+1)
	for b := range block {
		block[b] = math.Exp(q.sigmaBlock * rng.NormFloat64())
	}
	var runs []results.CapacityRun
	for round := 0; ; round++ {
		if round > 50 {
			t.Fatal("the search does not end")
		}
		rep := results.AnalyzeCapacity(spec, runs)
		s := rep.Searches[0]
		rates, note := Search(c, &s)
		if len(rates) == 0 {
			s.Note = note
			return s
		}
		for _, r := range rates {
			for b := 1; b <= c.Blocks; b++ {
				run := results.CapacityRun{CellInfo: results.CellInfo{Config: "plain", Shape: "s", Rate: r}, Block: b, Status: results.VerdictOK}
				if r >= 0.97*q.mu {
					run.Status, run.Value = results.VerdictSaturated, math.NaN()
				} else {
					run.Value = q.base / (1 - r/q.mu) * block[b] * math.Exp(q.sigma*rng.NormFloat64())
				}
				runs = append(runs, run)
			}
		}
	}
}

// TestCapacitySearchCoversTruth: over many seeds, the interval the search
// reports contains the model's true capacity at the SLO in at least 90% of
// searches (each probe's decision is a 95% CI; the search makes several),
// the search ends within max_probes, and a finished bracket is as narrow as
// the tolerance allows unless an uncertain band keeps it wider.
func TestCapacitySearchCoversTruth(t *testing.T) {
	c := &matrices.Capacity{Metric: "ttft_p90", MaxMs: 60, Lo: 4, Hi: 32, Tolerance: 0.05, Blocks: 3, MaxProbes: 14, Expand: 4}
	for _, q := range []queueModel{
		{base: 20, mu: 50, sigma: 0.10, sigmaBlock: 0.03}, // crossing inside [lo, hi] only after expanding hi
		{base: 20, mu: 30, sigma: 0.05, sigmaBlock: 0.02}, // inside
		{base: 20, mu: 6, sigma: 0.10, sigmaBlock: 0.05},  // near lo: halving below it
	} {
		truth := q.truth(c.MaxMs)
		const n = 200
		covered, probes := 0, 0
		for seed := range n {
			rng := rand.New(rand.NewPCG(uint64(seed), 99))
			s := searchModel(t, c, q, rng)
			probes += len(s.Probes)
			if len(s.Probes) > c.MaxProbes {
				t.Fatalf("mu %v seed %d: %d probes > max_probes", q.mu, seed, len(s.Probes))
			}
			if s.Lo == nil || s.Hi == nil {
				t.Fatalf("mu %v seed %d: no bracket: %s", q.mu, seed, s.Note)
			}
			if *s.Lo <= truth && truth <= *s.Hi {
				covered++
			}
			if s.BandLo == nil && *s.Hi > *s.Lo*(1+c.Tolerance) && len(s.Probes) < c.MaxProbes {
				t.Errorf("mu %v seed %d: bracket [%v, %v] wider than the tolerance without a band (%s)", q.mu, seed, *s.Lo, *s.Hi, s.Note)
			}
		}
		t.Logf("mu %v: truth %.3f covered in %d/%d searches, %.1f probes on average", q.mu, truth, covered, n, float64(probes)/n)
		if covered < n*9/10 {
			t.Errorf("mu %v: the interval covered the true capacity %.3f in %d of %d searches, want ≥ 90%%", q.mu, truth, covered, n)
		}
	}
}

func TestPlanSearchSteps(t *testing.T) {
	c := &matrices.Capacity{Lo: 1, Hi: 64, Tolerance: 0.05, Blocks: 3, MaxProbes: 12, Expand: 2}
	probe := func(rate float64, v results.ProbeVerdict) results.CapacityProbe {
		return results.CapacityProbe{Rate: rate, Verdict: v}
	}
	f := func(x float64) *float64 { return &x }
	for _, tc := range []struct {
		name string
		s    results.CapacitySearch
		want []float64
	}{
		{"start with lo and hi", results.CapacitySearch{}, []float64{1, 64}},
		{"hi holds: double it", results.CapacitySearch{Probes: []results.CapacityProbe{probe(1, results.ProbeHolds), probe(64, results.ProbeHolds)}, Lo: f(64)}, []float64{128}},
		{"expand limit reached", results.CapacitySearch{Probes: []results.CapacityProbe{probe(1, results.ProbeHolds), probe(256, results.ProbeHolds)}, Lo: f(256)}, nil},
		{"lo fails: halve it", results.CapacitySearch{Probes: []results.CapacityProbe{probe(1, results.ProbeFails), probe(64, results.ProbeFails)}, Hi: f(1)}, []float64{0.5}},
		{"bisect geometrically", results.CapacitySearch{Probes: []results.CapacityProbe{probe(1, results.ProbeHolds), probe(64, results.ProbeFails)}, Lo: f(1), Hi: f(64)}, []float64{8}},
		{"narrow the gap below the band first", results.CapacitySearch{Probes: []results.CapacityProbe{probe(10, results.ProbeHolds), probe(16, results.ProbeUncertain), probe(20, results.ProbeFails)},
			Lo: f(10), Hi: f(20), BandLo: f(16), BandHi: f(16)}, []float64{12.6}},
		{"then above it", results.CapacitySearch{Probes: []results.CapacityProbe{probe(15.5, results.ProbeHolds), probe(16, results.ProbeUncertain), probe(20, results.ProbeFails)},
			Lo: f(15.5), Hi: f(20), BandLo: f(16), BandHi: f(16)}, []float64{17.9}},
		{"within tolerance", results.CapacitySearch{Probes: []results.CapacityProbe{probe(10, results.ProbeHolds), probe(10.4, results.ProbeFails)}, Lo: f(10), Hi: f(10.4)}, nil},
		{"no data anywhere", results.CapacitySearch{Probes: []results.CapacityProbe{probe(1, results.ProbeNoData), probe(64, results.ProbeNoData)}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, note := Search(c, &tc.s)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v (%s), want %v", got, note, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("got %v, want %v", got, tc.want)
				}
			}
			if len(got) == 0 && note == "" {
				t.Error("a finished search says nothing about how it ended")
			}
		})
	}
}

// TestExpectedProbes: on a noiseless engine whose capacity lies within
// [lo, hi], the search probes exactly as many rates as validate's estimate
// (matrices.Capacity.ExpectedProbes) says, wherever the capacity lies.
func TestExpectedProbes(t *testing.T) {
	for _, c := range []matrices.Capacity{
		{Lo: 60, Hi: 240, Tolerance: 0.15},
		{Lo: 1, Hi: 64, Tolerance: 0.05},
		{Lo: 10, Hi: 11, Tolerance: 0.2},
		{Lo: 0.5, Hi: 32, Tolerance: 0.01, MaxProbes: 6},
	} {
		c.Metric, c.MaxMs, c.Blocks, c.Expand = "ttft_p90", 100, 2, 4
		if c.MaxProbes == 0 {
			c.MaxProbes = 12
		}
		want := c.ExpectedProbes()
		for i := 1; i < 40; i++ {
			truth := c.Lo * math.Pow(c.Hi/c.Lo, float64(i)/40)
			q := queueModel{base: 50, mu: 2 * truth} // metric 100 ms exactly at truth
			s := searchModel(t, &c, q, rand.New(rand.NewPCG(1, uint64(i))))
			if len(s.Probes) != want {
				t.Errorf("lo %g hi %g tolerance %g, capacity %.4g: %d probes, validate estimates %d (%s)", c.Lo, c.Hi, c.Tolerance, truth, len(s.Probes), want, s.Note)
			}
		}
	}
}
