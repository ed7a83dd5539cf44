package results

import (
	"math"
	"testing"
)

func TestCompareKnownValues(t *testing.T) {
	base := map[int]float64{1: 100, 2: 200, 3: 50, 4: 80}
	treat := map[int]float64{1: 110, 2: 224, 3: 54, 5: 999} // block 4 and 5 unpaired
	c := Compare(base, treat, 0.95)
	// Ground truth by hand: the mean log ratio, its standard error, and the
	// Student t on 2 df in closed form (CDF 1/2 + t/(2√(t²+2)), so the
	// 0.975 quantile is 0.95/√(2·0.975·0.025) and the two-sided p of t is
	// 1 − |t|/√(t²+2)).
	logs := []float64{math.Log(1.10), math.Log(1.12), math.Log(1.08)}
	m := (logs[0] + logs[1] + logs[2]) / 3
	ss := 0.0
	for _, l := range logs {
		ss += (l - m) * (l - m)
	}
	se := math.Sqrt(ss/2) / math.Sqrt(3)
	half := 0.95 / math.Sqrt(2*0.975*0.025) * se
	if c.N != 3 || len(c.Blocks) != 3 || c.Blocks[2] != 3 {
		t.Fatalf("paired blocks = %v", c.Blocks)
	}
	if !near(c.MeanLog, m, 1e-12) || !near(c.Effect, math.Exp(m)-1, 1e-12) ||
		!near(c.Lo, math.Exp(m-half)-1, 1e-9) || !near(c.Hi, math.Exp(m+half)-1, 1e-9) {
		t.Errorf("effect %v [%v, %v], want [%v, %v]", c.Effect, c.Lo, c.Hi, math.Exp(m-half)-1, math.Exp(m+half)-1)
	}
	tStat := m / se
	if want := 1 - tStat/math.Sqrt(tStat*tStat+2); !near(c.P, want, 1e-9) || c.P > 0.05 {
		t.Errorf("p = %v, want %v", c.P, want)
	}
	// Unpaired ranks: base 50,100,200 → ranks 1,3,5, U = 9 − 6 = 3; exact
	// null counts of U = 0..3 are 1,1,2,3 of 20 ⇒ p = 2·7/20 = 0.7. The
	// unpaired test cannot see what pairing shows.
	if !near(c.PMW, 0.7, 1e-12) {
		t.Errorf("Mann–Whitney p = %v, want 0.7", c.PMW)
	}
	if !c.Significant() {
		t.Error("a consistent +10% over 3 blocks is not significant")
	}
}

func TestComparisonString(t *testing.T) {
	cases := []struct {
		name string
		c    Comparison
		want string
	}{
		{"effect", Comparison{N: 5, Effect: 0.123, Lo: 0.081, Hi: 0.166, P: 0.001, PAdj: 0.004, Confidence: 0.95}, "+12.3% [+8.1, +16.6]"},
		{"negative effect", Comparison{N: 5, Effect: -0.06, Lo: -0.09, Hi: -0.031, PAdj: 0.01, Confidence: 0.95}, "-6.0% [-9.0, -3.1]"},
		{"CI includes 0", Comparison{N: 5, Effect: 0.02, Lo: -0.03, Hi: 0.07, HalfLog: 0.0491, P: 0.3, PAdj: 0.3, Confidence: 0.95}, "within noise (±5.0%; could detect ±7.3%)"},
		{"significant alone, not after Holm", Comparison{N: 5, Effect: 0.05, Lo: 0.01, Hi: 0.09, HalfLog: 0.0381, P: 0.03, PAdj: 0.12, Confidence: 0.95}, "within noise (±4.0%; could detect ±5.6%)"},
		{"one block", Comparison{N: 1, Effect: 0.3}, "n/a (1 block)"},
		{"no block", Comparison{}, "n/a (0 blocks)"},
		{"saturated effect", Comparison{N: 3, Effect: 0.29, Lo: 0.2, Hi: 0.38, PAdj: 0.001, Confidence: 0.95, Saturated: true}, "+29.0% [+20.0, +38.0] [saturated]"},
		{"saturated noise", Comparison{N: 3, Effect: 0.29, Lo: -0.2, Hi: 0.9, HalfLog: 0.4325, PAdj: 0.3, Confidence: 0.95, Saturated: true}, "within noise (±55.0%; could detect ±85.6%) [saturated]"},
		{"saturated n/a", Comparison{N: 1, Saturated: true}, "n/a (1 block) [saturated]"},
	}
	for _, c := range cases {
		if got := c.c.String(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestCompareEdgeCases(t *testing.T) {
	// Identical ratio in every block: sd 0, the effect is exact.
	c := Compare(map[int]float64{1: 100, 2: 200}, map[int]float64{1: 150, 2: 300}, 0.95)
	if c.P != 0 || c.String() != "+50.0% [+50.0, +50.0]" {
		t.Errorf("exact ratio: p=%v %q", c.P, c.String())
	}
	c = Compare(map[int]float64{1: 100, 2: 200}, map[int]float64{1: 100, 2: 200}, 0.95)
	if c.P != 1 || c.String() != "within noise (±0.0%; could detect ±0.0%)" {
		t.Errorf("identical: p=%v %q", c.P, c.String())
	}
	// Zero, negative and infinite values cannot be log ratios: left out.
	c = Compare(map[int]float64{1: 0, 2: 100, 3: math.Inf(1)}, map[int]float64{1: 5, 2: -1, 3: 7}, 0.95)
	if c.N != 0 || c.String() != "n/a (0 blocks)" {
		t.Errorf("bad values: N=%d %q", c.N, c.String())
	}
	// Holm over a family: the smallest p is multiplied by the family size.
	cs := []Comparison{{N: 5, P: 0.01}, {N: 5, P: 0.04}, {N: 1, P: 1, PAdj: 1}}
	AdjustHolm(cs)
	if !near(cs[0].PAdj, 0.02, 1e-12) || !near(cs[1].PAdj, 0.04, 1e-12) || cs[2].PAdj != 1 {
		t.Errorf("AdjustHolm: %v %v %v", cs[0].PAdj, cs[1].PAdj, cs[2].PAdj)
	}
}

// near reports whether got is within tol of want (NaN equals NaN).
func near(got, want, tol float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return math.Abs(got-want) <= tol
}
