package stats

import (
	"math"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
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

func TestGradeKSTest(t *testing.T) {
	exp1 := func(x float64) float64 { return -math.Expm1(-x) }
	// Hand-computed: rate 1, gaps ln2 and ln4 ⇒ F = 0.5, 0.75 ⇒ D = 0.5.
	if d, _ := KSTest([]float64{math.Ln2, 2 * math.Ln2}, exp1); !near(d, 0.5, 1e-12) {
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
		gd, gp := KSTest(xs, uniform)
		if !near(gd, d, 1e-12) || !near(gp, c.p, c.tol) {
			t.Errorf("λ=%v: D=%v p=%v, want D=%v p≈%v", c.lambda, gd, gp, d, c.p)
		}
	}
}

// TestTQuantileKeptValues: a kept quantile is the one computed afresh, on
// the first call and on the next.
func TestTQuantileKeptValues(t *testing.T) {
	for _, q := range []float64{0.9, 0.95, 0.975, 0.995} {
		for nu := 1.0; nu <= 200; nu++ {
			want := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: nu}.Quantile(q)
			for i := 0; i < 2; i++ {
				if got := TQuantile(q, nu); got != want {
					t.Fatalf("TQuantile(%g, %g) call %d = %v, want %v", q, nu, i+1, got, want)
				}
			}
		}
	}
}

// BenchmarkTQuantile: a kept quantile against computing it (the baseline,
// in the same run).
func BenchmarkTQuantile(b *testing.B) {
	b.Run("computed", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			_ = distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(2 + i%50)}.Quantile(0.975)
		}
	})
	b.Run("kept", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			_ = TQuantile(0.975, float64(2+i%50))
		}
	})
}
