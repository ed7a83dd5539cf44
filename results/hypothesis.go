package results

import (
	"golang.org/x/perf/benchmath"
	"math"
	"sort"

	"gonum.org/v1/gonum/stat/distuv"
)

// KSExponential is the one-sample Kolmogorov–Smirnov test of gaps against the
// exponential distribution with the given rate (the inter-arrival law of a
// Poisson process). It returns the statistic D = sup|F_n(x) − F(x)| and its
// asymptotic p-value Q_KS((√n + 0.12 + 0.11/√n)·D) (Stephens' small-sample
// correction, as in Numerical Recipes). ok is false when no test is possible
// (fewer than two gaps, or a rate that is not positive).
func KSExponential(gaps []float64, rate float64) (d, p float64, ok bool) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return 0, 0, false
	}
	return ksTest(gaps, func(x float64) float64 { return -math.Expm1(-rate * x) })
}

// ksTest is the one-sample KS test of xs against the continuous CDF cdf.
func ksTest(xs []float64, cdf func(float64) float64) (d, p float64, ok bool) {
	n := len(xs)
	if n < 2 {
		return 0, 0, false
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	fn := float64(n)
	for i, x := range s {
		f := 0.0
		if x > 0 {
			f = cdf(x)
		}
		d = math.Max(d, math.Max(float64(i+1)/fn-f, f-float64(i)/fn))
	}
	sq := math.Sqrt(fn)
	return d, kolmogorovQ((sq + 0.12 + 0.11/sq) * d), true
}

// kolmogorovQ is the complementary CDF of the Kolmogorov distribution,
// Q(λ) = 2 Σ_{k≥1} (−1)^{k−1} exp(−2k²λ²).
func kolmogorovQ(lambda float64) float64 {
	if lambda < 0.2 {
		return 1 // the series equals 1 to double precision here
	}
	var sum, sign float64 = 0, 1
	for k := 1; k <= 100; k++ {
		term := sign * math.Exp(-2*float64(k*k)*lambda*lambda)
		sum += term
		if math.Abs(term) < 1e-12*math.Abs(sum) {
			break
		}
		sign = -sign
	}
	return math.Max(0, math.Min(1, 2*sum))
}

// trend is the least-squares fit of y against x and the one-sided t-test of
// a positive slope.
type trend struct {
	Slope float64 // dy/dx
	P     float64 // one-sided p-value of H0: slope ≤ 0
	Span  float64 // max(x) − min(x)
}

// fitTrend fits y = a + b·x by least squares and tests b > 0 with the t
// statistic b/se(b) on n−2 degrees of freedom. ok is false with fewer than
// three points or no spread in x.
func fitTrend(x, y []float64) (tr trend, ok bool) {
	n := len(x)
	if n < 3 || len(y) != n {
		return trend{}, false
	}
	mx, my := meanOf(x), meanOf(y)
	var sxx, sxy float64
	minX, maxX := x[0], x[0]
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
		minX, maxX = math.Min(minX, x[i]), math.Max(maxX, x[i])
	}
	if sxx == 0 {
		return trend{}, false
	}
	b := sxy / sxx
	a := my - b*mx
	var rss float64
	for i := range x {
		r := y[i] - a - b*x[i]
		rss += r * r
	}
	tr = trend{Slope: b, Span: maxX - minX}
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
