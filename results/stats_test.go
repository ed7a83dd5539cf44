package results

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mbench/mbench/openloop"
)

// near reports whether got is within tol of want (NaN equals NaN).
func near(got, want, tol float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return math.Abs(got-want) <= tol
}

func TestPercentileMatchesNumpyLinear(t *testing.T) {
	// Expected values computed by hand with numpy's default ("linear"):
	// h = (n−1)·p/100, x[⌊h⌋] + frac(h)·(x[⌊h⌋+1] − x[⌊h⌋]).
	cases := []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, 50, 2.5},
		{[]float64{1, 2, 3, 4}, 90, 3.7},  // h = 2.7
		{[]float64{1, 2, 3, 4}, 99, 3.97}, // h = 2.97
		{[]float64{4, 1, 3, 2}, 0, 1},     // unsorted input
		{[]float64{4, 1, 3, 2}, 100, 4},
		{[]float64{15, 20, 35, 40, 50}, 40, 29}, // h = 1.6: 20 + 0.6·15
		{[]float64{15, 20, 35, 40, 50}, 90, 46}, // h = 3.6: 40 + 0.6·10
		{[]float64{7}, 99, 7},
		{nil, 50, math.NaN()},
		{[]float64{1, 2}, 101, math.NaN()},
		{[]float64{1, 2}, -1, math.NaN()},
	}
	for _, c := range cases {
		if got := Percentile(c.xs, c.p); !near(got, c.want, 1e-12) {
			t.Errorf("Percentile(%v, %v) = %v, want %v", c.xs, c.p, got, c.want)
		}
	}
	xs := []float64{3, 1, 2}
	Percentile(xs, 50)
	if xs[0] != 3 {
		t.Error("Percentile modified its input")
	}
}

func TestMeanCIAndCV(t *testing.T) {
	xs := []float64{10, 12, 14, 16, 18}
	m, half := MeanCI(xs, 0.95)
	// s = √10, t(0.975, 4) = 2.776445 ⇒ half = 2.776445105·√2 = 3.926486.
	if !near(m, 14, 1e-12) || !near(half, 3.926486, 1e-5) {
		t.Errorf("MeanCI = %v ± %v, want 14 ± 3.926486", m, half)
	}
	if _, h := MeanCI([]float64{5}, 0.95); !math.IsNaN(h) {
		t.Errorf("one value: half = %v, want NaN", h)
	}
	if m, _ := MeanCI(nil, 0.95); !math.IsNaN(m) {
		t.Errorf("no values: mean = %v, want NaN", m)
	}
	if _, h := MeanCI(xs, 1.5); !math.IsNaN(h) {
		t.Errorf("confidence 1.5: half = %v, want NaN", h)
	}
	if cv := CV(xs); !near(cv, math.Sqrt(10)/14, 1e-12) {
		t.Errorf("CV = %v, want %v", cv, math.Sqrt(10)/14)
	}
	ok, rel := Converged(xs, 0.30, 0.95)
	if !ok || !near(rel, 3.926486/14, 1e-5) {
		t.Errorf("Converged(0.30) = %v, %v", ok, rel)
	}
	if ok, _ := Converged(xs, 0.05, 0.95); ok {
		t.Error("Converged(0.05) = true with a 28% half-width")
	}
	if ok, rel := Converged([]float64{1}, 0.05, 0.95); ok || !math.IsNaN(rel) {
		t.Errorf("Converged(one value) = %v, %v", ok, rel)
	}
}

func TestHolm(t *testing.T) {
	// sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, max(0.04·1, 0.06).
	got := Holm([]float64{0.01, 0.04, 0.03, 0.005, math.NaN()})
	want := []float64{0.03, 0.06, 0.06, 0.02, math.NaN()}
	for i := range want {
		if !near(got[i], want[i], 1e-12) {
			t.Errorf("Holm[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if got := Holm([]float64{0.5, 0.9}); got[0] != 1 || got[1] != 1 {
		t.Errorf("Holm caps at 1: %v", got)
	}
}

func TestMannWhitney(t *testing.T) {
	cases := []struct {
		name string
		x, y []float64
		want float64
	}{
		{"exact 3v3", []float64{1, 2, 3}, []float64{4, 5, 6}, 2.0 / 20},
		{"exact 5v5", []float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 2.0 / 252},
		// scipy.stats.mannwhitneyu docs example: exact p = 0.1111.
		{"scipy exact", []float64{19, 22, 16, 29, 24}, []float64{20, 11, 17, 12}, 1.0 / 9},
		// ties: the exact permutation p-value, enumerated below.
		{"ties", []float64{1, 2, 2, 3, 4, 5}, []float64{3, 4, 4, 6, 7, 8, 9}, permutationMWP([]float64{1, 2, 2, 3, 4, 5}, []float64{3, 4, 4, 6, 7, 8, 9})},
		{"identical", []float64{1, 1}, []float64{1, 1}, 1},
	}
	for _, c := range cases {
		if got := MannWhitneyP(c.x, c.y); !near(got, c.want, 1e-9) {
			t.Errorf("%s: p = %v, want %v", c.name, got, c.want)
		}
	}
	if !math.IsNaN(MannWhitneyP(nil, []float64{1})) {
		t.Error("empty sample: want NaN")
	}
}

// TestGradeKSTest pins the KS test the summaries carry (openloop's, through
// the self-grading) to hand-computed statistics and to published critical
// values of the Kolmogorov distribution.
func TestGradeKSTest(t *testing.T) {
	exp1 := func(x float64) float64 { return -math.Expm1(-x) }
	// Hand-computed: rate 1, gaps ln2 and ln4 ⇒ F = 0.5, 0.75 ⇒ D = 0.5.
	if d, _ := openloop.KSTest([]float64{math.Ln2, 2 * math.Ln2}, exp1); !near(d, 0.5, 1e-12) {
		t.Errorf("D = %v, want 0.5", d)
	}
	// A sample built to have D exactly λ/(√n + 0.12 + 0.11/√n) against the
	// uniform law: its p-value is Q(λ), and Q(1.358) ≈ 0.05, Q(1.628) ≈ 0.01.
	uniform := func(x float64) float64 { return math.Max(0, math.Min(1, x)) }
	for _, c := range []struct{ lambda, p, tol float64 }{{1.358, 0.05, 0.001}, {1.628, 0.01, 0.0005}} {
		const n = 10000
		sn := math.Sqrt(n)
		d := c.lambda / (sn + 0.12 + 0.11/sn)
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(i+1)/n - d // F_n(x_i) − F(x_i) = D just after each point
		}
		gd, gp := openloop.KSTest(xs, uniform)
		if !near(gd, d, 1e-12) || !near(gp, c.p, c.tol) {
			t.Errorf("λ=%v: D=%v p=%v, want D=%v p≈%v", c.lambda, gd, gp, d, c.p)
		}
	}
}

func TestFitTrend(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var x, rising, flat []float64
	for i := 0; i < 200; i++ {
		xi := float64(i) / 2 // 100 s
		x = append(x, xi)
		rising = append(rising, 300+20*xi+rng.NormFloat64()*30) // +2000 ms over the window
		flat = append(flat, 300+rng.NormFloat64()*30)
	}
	tr, ok := fitTrend(x, rising)
	if !ok || !near(tr.Slope, 20, 0.5) || tr.P > 1e-6 || !near(tr.Span, 99.5, 1e-9) {
		t.Errorf("rising: %+v", tr)
	}
	if tr, _ := fitTrend(x, flat); tr.P < 0.01 {
		t.Errorf("flat series flagged: %+v", tr)
	}
	if _, ok := fitTrend([]float64{1, 1, 1}, []float64{1, 2, 3}); ok {
		t.Error("no spread in x: want no fit")
	}
}

// permutationMWP is the exact two-sided Mann–Whitney p-value by brute force:
// over every split of the pooled values into groups of len(xs) and len(ys),
// twice the smaller tail of the U statistics at or beyond the observed one.
func permutationMWP(xs, ys []float64) float64 {
	pool := append(append([]float64(nil), xs...), ys...)
	u := func(a []bool) float64 {
		var s float64
		for i, in := range a {
			if !in {
				continue
			}
			for j, jn := range a {
				if jn {
					continue
				}
				switch {
				case pool[i] > pool[j]:
					s++
				case pool[i] == pool[j]:
					s += 0.5
				}
			}
		}
		return s
	}
	n1, n := len(xs), len(pool)
	obs := make([]bool, n)
	for i := range xs {
		obs[i] = true
	}
	u0 := u(obs)
	var lo, hi, total float64
	var rec func(i, left int, a []bool)
	rec = func(i, left int, a []bool) {
		if left == 0 {
			total++
			v := u(a)
			if v <= u0+1e-9 {
				lo++
			}
			if v >= u0-1e-9 {
				hi++
			}
			return
		}
		if n-i < left {
			return
		}
		a[i] = true
		rec(i+1, left-1, a)
		a[i] = false
		rec(i+1, left, a)
	}
	rec(0, n1, make([]bool, n))
	return math.Min(1, 2*math.Min(lo, hi)/total)
}
