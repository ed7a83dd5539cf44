package stats

import (
	"math"

	"golang.org/x/perf/benchmath"
	"gonum.org/v1/gonum/stat/distuv"
)

// Trend is the least-squares fit of y against x and the one-sided t-test of
// a positive slope.
type Trend struct {
	Slope float64 // dy/dx
	P     float64 // one-sided p-value of H0: slope ≤ 0
	Span  float64 // max(x) − min(x)
}

// FitTrend fits y = a + b·x by least squares and tests b > 0 with the t
// statistic b/se(b) on n−2 degrees of freedom. ok is false with fewer than
// three points or no spread in x.
func FitTrend(x, y []float64) (tr Trend, ok bool) {
	n := len(x)
	if n < 3 || len(y) != n {
		return Trend{}, false
	}
	mx, my := Mean(x), Mean(y)
	var sxx, sxy float64
	minX, maxX := x[0], x[0]
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
		minX, maxX = math.Min(minX, x[i]), math.Max(maxX, x[i])
	}
	if sxx == 0 {
		return Trend{}, false
	}
	b := sxy / sxx
	a := my - b*mx
	var rss float64
	for i := range x {
		r := y[i] - a - b*x[i]
		rss += r * r
	}
	tr = Trend{Slope: b, Span: maxX - minX}
	se := math.Sqrt(rss / float64(n-2) / sxx)
	switch {
	case se == 0 && b > 0:
		tr.P = 0
	case se == 0:
		tr.P = 1
	default:
		tr.P = distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(n - 2)}.Survival(b / se)
	}
	return tr, true
}

// MannWhitneyP is the two-sided p-value of the Mann–Whitney U test (Wilcoxon
// rank-sum) that xs and ys come from distributions with the same location,
// computed by golang.org/x/perf/benchmath (benchstat's test, exact for small
// samples). It returns NaN when either sample is empty.
func MannWhitneyP(xs, ys []float64) float64 {
	if len(xs) == 0 || len(ys) == 0 {
		return math.NaN()
	}
	a := benchmath.NewSample(append([]float64(nil), xs...), &benchmath.DefaultThresholds)
	b := benchmath.NewSample(append([]float64(nil), ys...), &benchmath.DefaultThresholds)
	return benchmath.AssumeNothing.Compare(a, b).P
}
