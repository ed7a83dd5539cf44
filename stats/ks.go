package stats

import (
	"math"
	"sort"

	"gonum.org/v1/gonum/stat/distuv"
)

// KSTest is the one-sample Kolmogorov–Smirnov test of xs against cdf: the
// statistic D and its asymptotic p-value (with Stephens' small-sample
// correction). xs is sorted in place.
func KSTest(xs []float64, cdf func(float64) float64) (d, p float64) {
	n := len(xs)
	if n == 0 {
		return 0, 1
	}
	sort.Float64s(xs)
	for i, x := range xs {
		f := cdf(x)
		d = max(d, f-float64(i)/float64(n), float64(i+1)/float64(n)-f)
	}
	return d, ksPValue(n, d)
}

// KSTestGrid is KSTest with the distribution functions compared only at the
// multiples of step (same unit as xs): insensitive to jitter well below step.
// Its p-value, from the continuous Kolmogorov distribution, is conservative.
// xs is sorted in place.
func KSTestGrid(xs []float64, cdf func(float64) float64, step float64) (d, p float64) {
	n := len(xs)
	if n == 0 || !(step > 0) {
		return KSTest(xs, cdf)
	}
	sort.Float64s(xs)
	i := 0
	for k := 1; ; k++ {
		x := float64(k) * step
		for i < n && xs[i] <= x {
			i++
		}
		d = max(d, math.Abs(float64(i)/float64(n)-cdf(x)))
		if i == n {
			break
		}
	}
	return d, ksPValue(n, d)
}

// ksPValue is the asymptotic p-value of the statistic d over n samples,
// with Stephens' small-sample correction: the survival function of the
// Kolmogorov distribution.
func ksPValue(n int, d float64) float64 {
	sn := math.Sqrt(float64(n))
	lambda := (sn + 0.12 + 0.11/sn) * d
	if lambda < 0.2 {
		return 1
	}
	sum, sign := 0.0, 1.0
	for k := 1; k <= 100; k++ {
		term := math.Exp(-2 * float64(k*k) * lambda * lambda)
		sum += sign * term
		sign = -sign
		if term < 1e-12 {
			break
		}
	}
	return math.Min(1, math.Max(0, 2*sum))
}

// PercentileSorted is the p-th percentile (0 ≤ p ≤ 100) of sorted (ascending)
// by linear interpolation between the closest ranks, numpy.percentile's
// default method "linear", which vllm bench serve uses: with h = (n−1)·p/100
// it is sorted[⌊h⌋] + (h−⌊h⌋)·(sorted[⌊h⌋+1] − sorted[⌊h⌋]). NaN for an empty
// slice or p outside [0, 100]. It is the one percentile of the module's
// sorted samples; probes computes the same definition from its streaming
// counts.
func PercentileSorted(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 || math.IsNaN(p) || p < 0 || p > 100 {
		return math.NaN()
	}
	h := float64(n-1) * p / 100
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// Quantile is PercentileSorted with q a fraction (0.99 for p99).
func Quantile(sorted []float64, q float64) float64 { return PercentileSorted(sorted, 100*q) }

// BinomialTail is P(X ≥ k) for X ~ Binomial(n, p): the one-sided p-value of
// k or more events in n trials when each happens with probability p.
func BinomialTail(k, n int, p float64) float64 {
	if k <= 0 || n == 0 {
		return 1
	}
	return 1 - distuv.Binomial{N: float64(n), P: p}.CDF(float64(k-1))
}
