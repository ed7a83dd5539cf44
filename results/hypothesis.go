package results

import (
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
// rank-sum) that xs and ys come from distributions with the same location.
// Without ties and with both samples of at most 50 values it is exact;
// otherwise it uses the normal approximation with tie and continuity
// corrections. It returns NaN when either sample is empty.
//
// It stands in for golang.org/x/perf/benchmath's AssumeNothing.Compare, which
// computes the same test but cannot be built from this module's go.sum.
func MannWhitneyP(xs, ys []float64) float64 {
	n1, n2 := len(xs), len(ys)
	if n1 == 0 || n2 == 0 {
		return math.NaN()
	}
	type obs struct {
		v     float64
		first bool
	}
	all := make([]obs, 0, n1+n2)
	for _, v := range xs {
		all = append(all, obs{v, true})
	}
	for _, v := range ys {
		all = append(all, obs{v, false})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	var r1, tieTerm float64
	ties := false
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		rank := float64(i+j+1) / 2 // average of 1-based ranks i+1..j
		for k := i; k < j; k++ {
			if all[k].first {
				r1 += rank
			}
		}
		if t := float64(j - i); t > 1 {
			ties = true
			tieTerm += t*t*t - t
		}
		i = j
	}
	u := r1 - float64(n1*(n1+1))/2
	if !ties && n1 <= 50 && n2 <= 50 {
		return mannWhitneyExact(int(math.Round(u)), n1, n2)
	}
	return mannWhitneyNormal(u, n1, n2, tieTerm)
}

// mannWhitneyNormal is the two-sided p-value of U = u by the normal
// approximation with tie correction (tieTerm = Σ t³ − t over tie groups) and
// continuity correction, as scipy's method="asymptotic".
func mannWhitneyNormal(u float64, n1, n2 int, tieTerm float64) float64 {
	fn1, fn2 := float64(n1), float64(n2)
	n := fn1 + fn2
	mu := fn1 * fn2 / 2
	sigma := math.Sqrt(fn1 * fn2 / 12 * ((n + 1) - tieTerm/(n*(n-1))))
	if sigma == 0 {
		return 1
	}
	z := (math.Abs(u-mu) - 0.5) / sigma
	if z < 0 {
		z = 0
	}
	return math.Min(1, 2*distuv.UnitNormal.Survival(z))
}

// mannWhitneyExact is the exact two-sided p-value of U = u for sample sizes
// n1, n2 without ties: twice the smaller tail of the null distribution of U,
// counted by the recurrence c(m, n, k) = c(m−1, n, k−n) + c(m, n−1, k).
func mannWhitneyExact(u, n1, n2 int) float64 {
	maxU := n1 * n2
	// prev[n][k] for m−1, cur[n][k] for m; counts as float64 (binomials up
	// to C(100,50) ≈ 1e29 fit with ample precision for a p-value).
	prev := make([][]float64, n2+1)
	for n := range prev {
		prev[n] = make([]float64, maxU+1)
		prev[n][0] = 1 // m = 0: only U = 0
	}
	for m := 1; m <= n1; m++ {
		cur := make([][]float64, n2+1)
		for n := 0; n <= n2; n++ {
			cur[n] = make([]float64, maxU+1)
			for k := 0; k <= m*n; k++ {
				v := 0.0
				if k-n >= 0 {
					v += prev[n][k-n]
				}
				if n > 0 {
					v += cur[n-1][k]
				}
				cur[n][k] = v
			}
		}
		prev = cur
	}
	counts := prev[n2]
	var total, lower, upper float64
	for k, c := range counts {
		total += c
		if k <= u {
			lower += c
		}
		if k >= u {
			upper += c
		}
	}
	return math.Min(1, 2*math.Min(lower, upper)/total)
}
