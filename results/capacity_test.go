package results

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mbench/mbench/stats"
)

func TestProbeVerdict(t *testing.T) {
	const limit = 100.0
	ci := func(lo, hi float64) (*float64, *float64) { return &lo, &hi }
	for _, tc := range []struct {
		name   string
		vals   []float64
		sat    int
		lo, hi float64
		want   ProbeVerdict
	}{
		{"CI below the limit", []float64{80, 85, 90}, 0, 75, 95, ProbeHolds},
		{"CI at the limit holds", []float64{90, 95, 100}, 0, 90, 100, ProbeHolds},
		{"CI above the limit", []float64{120, 125, 130}, 0, 110, 140, ProbeFails},
		{"CI straddles", []float64{90, 100, 115}, 0, 80, 120, ProbeUncertain},
		{"all saturated", nil, 3, 0, 0, ProbeFails},
		{"saturated and over the limit", []float64{130}, 2, 0, 0, ProbeFails},
		{"saturated and holding mixed", []float64{60, 70}, 1, 50, 80, ProbeUncertain},
		{"one block counts", []float64{60}, 0, 0, 0, ProbeNoData},
		{"nothing counts", nil, 0, 0, 0, ProbeNoData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lo, hi *float64
			if len(tc.vals) >= 2 {
				lo, hi = ci(tc.lo, tc.hi)
			}
			l := limit
			if got, _ := boundVerdict(Bound{Metric: "m", MaxMs: &l}, tc.vals, tc.sat, lo, hi); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// capRuns makes the runs of one config: metric(rate, block) for every rate
// and block; +Inf stands for a saturated run, NaN for a run that failed.
func capRuns(cfg string, rates []float64, blocks int, metric func(rate float64, block int) float64) []CapacityRun {
	var out []CapacityRun
	for _, r := range rates {
		for b := 1; b <= blocks; b++ {
			v := metric(r, b)
			run := CapacityRun{CellInfo: CellInfo{Config: cfg, Shape: "s", ID: cfg + "-" + fmt.Sprint(r), Rate: r}, Block: b, Status: VerdictOK, Value: v}
			switch {
			case math.IsInf(v, 1):
				run.Status, run.Value = VerdictSaturated, math.NaN()
			case math.IsNaN(v):
				run.Status = VerdictClientLimited
			}
			out = append(out, run)
		}
	}
	return out
}

func testSpec() CapacitySpec {
	return CapacitySpec{Metric: "ttft_p90", MaxMs: 100, Lo: 10, Hi: 80, Tolerance: 0.05, Blocks: 4,
		Confidence: 0.95, Baseline: "plain", Configs: []string{"plain", "taxed"}, Shapes: []string{"s"}}
}

// TestAnalyzeCapacityBrackets: a metric that rises with the rate and
// saturates beyond 60 req/s is bracketed where it crosses 100 ms; a block
// whose run was client-limited is left out, not counted as failing.
func TestAnalyzeCapacityBrackets(t *testing.T) {
	rates := []float64{10, 30, 40, 45, 50, 55, 80}
	jit := []float64{0.5, 1, -1, -0.5}
	runs := capRuns("plain", rates, 4, func(r float64, b int) float64 {
		switch {
		case r >= 60:
			return math.Inf(1)
		case r == 30 && b == 2:
			return math.NaN() // client_limited: says nothing about the SLO
		}
		return 2*r + jit[b-1] // crosses 100 ms at 50 req/s
	})
	rep := AnalyzeCapacity(testSpec(), runs)
	s := rep.Search("plain", "s")
	if s == nil || s.Lo == nil || s.Hi == nil {
		t.Fatalf("no bracket: %+v", s)
	}
	if *s.Lo != 45 || *s.Hi != 55 {
		t.Errorf("interval [%v, %v], want [45, 55]", *s.Lo, *s.Hi)
	}
	if s.BandLo == nil || *s.BandLo != 50 || *s.BandHi != 50 {
		t.Errorf("band %v–%v, want 50–50 (its CI straddles 100 ms)", s.BandLo, s.BandHi)
	}
	p30 := s.Probes[1]
	if p30.Rate != 30 || p30.N != 3 || p30.Verdict != ProbeHolds {
		t.Errorf("rate 30: n=%d verdict %s, want 3 counted blocks and holds", p30.N, p30.Verdict)
	}
	for b, c := range s.PerBlock {
		if c < 49 || c > 51 {
			t.Errorf("block %d: interpolated capacity %v, want ≈50", b, c)
		}
	}
	if s.Estimate == nil || *s.EstLo > 50 || *s.EstHi < 50 {
		t.Errorf("estimate %v [%v, %v] does not cover 50", s.Estimate, s.EstLo, s.EstHi)
	}
}

// TestAnalyzeCapacityPairedRatio: a config whose metric is 25% higher at
// every rate sustains 20% less load at the SLO; with probes 2% apart near
// both crossings (as a search within tolerance leaves them) the paired CI
// from the brackets says so and excludes 0, while an identical twin's is
// within noise.
func TestAnalyzeCapacityPairedRatio(t *testing.T) {
	rates := []float64{20, 30, 37, 38, 39, 39.8, 40.6, 41.4, 42.2, 45, 48, 49, 49.8, 50.8, 51.8, 52.8, 55, 60}
	rng := rand.New(rand.NewPCG(1, 2))
	blockNoise := []float64{1, 1.03, 0.98, 1.01}
	noise := map[[2]float64]float64{}
	for _, r := range rates {
		for b := 1; b <= 4; b++ {
			noise[[2]float64{r, float64(b)}] = 1 + 0.01*rng.NormFloat64()
		}
	}
	base := func(r float64, b int) float64 { return 2 * r * blockNoise[b-1] * noise[[2]float64{r, float64(b)}] }
	runs := capRuns("plain", rates, 4, base)
	runs = append(runs, capRuns("taxed", rates, 4, func(r float64, b int) float64 { return 1.25 * base(r, b) })...)
	twin := capRuns("twin", rates, 4, base)
	for i := range twin {
		twin[i].ID += "-twin"
	}
	runs = append(runs, twin...)
	sp := testSpec()
	sp.Configs = append(sp.Configs, "twin")
	rep := AnalyzeCapacity(sp, runs)
	if len(rep.Comparisons) != 2 {
		t.Fatalf("%d comparisons, want 2", len(rep.Comparisons))
	}
	taxed, tw := rep.Comparisons[0], rep.Comparisons[1]
	if taxed.Config != "taxed" || taxed.N != 4 || !(taxed.Hi < 0) || taxed.Lo > -0.2 || taxed.Hi < -0.2 {
		t.Errorf("taxed: %+v: want 4 blocks and a CI below 0 that covers −20%%", taxed.Comparison)
	}
	if w := CapacityChange(taxed.Comparison); !strings.HasPrefix(w, "sustains ") || !strings.Contains(w, "% less load [-") {
		t.Errorf("taxed in words: %q", CapacityChange(taxed.Comparison))
	}
	if tw.Effect != 0 || tw.Significant() {
		t.Errorf("twin: %+v: want exactly 0 and not significant", tw.Comparison)
	}
}

// TestCapacitySharedSaturatedBrackets: when every block holds at the same
// rate and saturates at the next, each block's crossing is known only to
// lie in that bracket: the estimate's CI and the paired comparison's
// contain the brackets, widened by the spread a crossing may have inside
// its bracket (width/√12 per block, t on n−1 degrees of freedom), never
// the zero-width interval the probes' midpoint gave ("sustains 29.4% less
// load [-29.4, -29.4]").
func TestCapacitySharedSaturatedBrackets(t *testing.T) {
	sp := testSpec()
	sp.MaxMs = 100
	step := func(knee float64) func(float64, int) float64 {
		return func(r float64, b int) float64 {
			if r >= knee {
				return math.Inf(1)
			}
			return 20 + float64(b)
		}
	}
	runs := append(capRuns("plain", []float64{50, 100, 110, 200}, 4, step(105)), capRuns("taxed", []float64{50, 72, 80, 200}, 4, step(76))...)
	rep := AnalyzeCapacity(sp, runs)
	tq := stats.TQuantile(0.975, 3)
	widen := func(lo, hi float64) (float64, float64) { // n = 4 blocks, all in one bracket
		se := (math.Log(hi) - math.Log(lo)) / math.Sqrt(12) / 2
		return lo * math.Exp(-tq*se), hi * math.Exp(tq*se)
	}
	eq := func(a *float64, b float64) bool { return a != nil && math.Abs(*a-b) < 1e-9 }
	for _, c := range []struct {
		cfg    string
		lo, hi float64
	}{{"plain", 100, 110}, {"taxed", 72, 80}} {
		s := rep.Search(c.cfg, "s")
		wl, wh := widen(c.lo, c.hi)
		if !eq(s.EstLo, wl) || !eq(s.EstHi, wh) {
			t.Errorf("%s: estimate CI [%v, %v], want the bracket [%v, %v] widened to [%v, %v]", c.cfg, deref(s.EstLo), deref(s.EstHi), c.lo, c.hi, wl, wh)
		}
	}
	c := rep.Comparisons[0].Comparison
	lo, hi := math.Log(72.0/110), math.Log(80.0/100)
	if !(c.Lo < math.Expm1(lo) && c.Hi > math.Expm1(hi)) || c.Hi-c.Lo > 0.5 || !c.Significant() {
		t.Errorf("paired CI [%+.4f, %+.4f] (significant %v), want one that contains the brackets' [%+.4f, %+.4f] and excludes 0", c.Lo, c.Hi, c.Significant(), math.Expm1(lo), math.Expm1(hi))
	}
	if w := CapacityChange(c); !strings.Contains(w, "less load [-") {
		t.Errorf("in words: %q", w)
	}
}

// TestCapacitySeveralBounds: a probe holds only when every bound holds; the
// crossing is the tightest bound's, so a search on TTFT and SLO attainment
// finds the lower of the two capacities (here attainment's, crossing 0.9
// at 40 req/s while TTFT crosses 100 ms at 50); each bound's verdict is
// kept, and a lower bound (attainment ≥ 0.9) holds on its CI's low end.
func TestCapacitySeveralBounds(t *testing.T) {
	ttft, att := 100.0, 0.9
	sp := testSpec()
	sp.Bounds = []Bound{{Metric: "ttft_p90", MaxMs: &ttft}, {Metric: "slo_attainment", Min: &att}}
	var runs []CapacityRun
	for _, r := range []float64{20, 30, 36, 38, 39, 41, 42, 44, 55} {
		for b := 1; b <= 4; b++ {
			j := 0.0005 * float64(b-2)
			runs = append(runs, CapacityRun{CellInfo: CellInfo{Config: "plain", Shape: "s", Rate: r}, Block: b, Status: VerdictOK, Value: 2 * r,
				Values: map[string]float64{"ttft_p90": 2 * r, "slo_attainment": 1.1 - r/200 + j}})
		}
	}
	rep := AnalyzeCapacity(sp, runs)
	s := rep.Search("plain", "s")
	if s.Lo == nil || s.Hi == nil || *s.Lo != 39 || *s.Hi != 41 {
		t.Fatalf("interval %v–%v, want [39, 41] around attainment's crossing at 40", deref(s.Lo), deref(s.Hi))
	}
	if s.EstLo == nil || *s.EstLo > 40 || *s.EstHi < 40 || math.Abs(*s.Estimate-40) > 0.5 {
		t.Errorf("estimate %v [%v, %v], want ≈40", deref(s.Estimate), deref(s.EstLo), deref(s.EstHi))
	}
	p41 := s.Probes[5]
	if p41.Rate != 41 || p41.Verdict != ProbeFails || len(p41.Bounds) != 2 || p41.Bounds[0].Verdict != ProbeHolds || p41.Bounds[1].Verdict != ProbeFails {
		t.Errorf("rate 41: %s, bounds %+v: want ttft holding and attainment failing", p41.Verdict, p41.Bounds)
	}
	if got := sp.BoundsText(); got != "ttft_p90 ≤ 100 ms, slo_attainment ≥ 0.9" {
		t.Errorf("in words: %q", got)
	}
	// A run without one bound's metric says nothing: it does not count.
	miss := []CapacityRun{{CellInfo: CellInfo{Config: "plain", Shape: "s", Rate: 10}, Block: 1, Status: VerdictOK, Value: 5, Values: map[string]float64{"ttft_p90": 5}}}
	mrep := AnalyzeCapacity(sp, miss)
	if p := mrep.Search("plain", "s").Probes[0]; p.N != 0 || p.Runs[0].Counts() {
		t.Errorf("a run without slo_attainment counted: %+v", p)
	}
}
