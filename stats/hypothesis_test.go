package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

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
func TestFitTrend(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var x, rising, flat []float64
	for i := 0; i < 200; i++ {
		xi := float64(i) / 2 // 100 s
		x = append(x, xi)
		rising = append(rising, 300+20*xi+rng.NormFloat64()*30) // +2000 ms over the window
		flat = append(flat, 300+rng.NormFloat64()*30)
	}
	tr, ok := FitTrend(x, rising)
	if !ok || !near(tr.Slope, 20, 0.5) || tr.P > 1e-6 || !near(tr.Span, 99.5, 1e-9) {
		t.Errorf("rising: %+v", tr)
	}
	if tr, _ := FitTrend(x, flat); tr.P < 0.01 {
		t.Errorf("flat series flagged: %+v", tr)
	}
	if _, ok := FitTrend([]float64{1, 1, 1}, []float64{1, 2, 3}); ok {
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
