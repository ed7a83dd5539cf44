package stats

import "math"

// WilsonCI is the Wilson score interval of a proportion p observed in n
// trials, at the two-sided critical value z (1.96 for 95%): it lies within
// [0, 1] for every p and n, unlike p ± z·√(p(1−p)/n). n ≤ 0 or a p outside
// [0, 1] gives NaNs.
func WilsonCI(p, n, z float64) (lo, hi float64) {
	if !(n > 0) || !(p >= 0 && p <= 1) {
		return math.NaN(), math.NaN()
	}
	if math.IsInf(n, 1) {
		return p, p
	}
	z2 := z * z
	den := 1 + z2/n
	center := (p + z2/(2*n)) / den
	half := z / den * math.Sqrt(p*(1-p)/n+z2/(4*n*n))
	return max(0, center-half), min(1, center+half)
}

// ProportionCI is the interval of the mean of per-block proportions
// values[i], each over trials[i] trials (requests), at the given confidence:
// a Wilson interval on the mean, with the number of trials taken as the
// effective sample size that the spread between blocks implies,
//
//	n_eff = p̄(1 − p̄) / (s² / k),
//
// (s² the sample variance of the k block values, so s²/k is the variance of
// their mean), capped at the trials counted, Σ trials[i] (the binomial
// floor: blocks that agree exactly still carry only that many requests), and
// the critical value Student's t on k − 1 degrees of freedom, as the other
// metrics' intervals use. So an interval over blocks that differ more than
// binomial noise says is as wide as their spread says (requests in one
// block are not independent draws), every interval is within [0, 1], and
// three blocks that all met the SLO in every request still leave room below
// 100%. ok is false with fewer than two blocks or a value outside [0, 1].
func ProportionCI(values, trials []float64, confidence float64) (mean, lo, hi float64, ok bool) {
	k := len(values)
	if k < 2 || len(trials) != k || !(confidence > 0 && confidence < 1) {
		return Mean(values), math.NaN(), math.NaN(), false
	}
	total := 0.0
	for i, v := range values {
		if !(v >= 0 && v <= 1) || !(trials[i] > 0) {
			return Mean(values), math.NaN(), math.NaN(), false
		}
		total += trials[i]
	}
	mean = Mean(values)
	nEff := total
	if s2 := SampleStd(values); s2 > 0 {
		nEff = min(nEff, mean*(1-mean)/(s2*s2/float64(k)))
	}
	nEff = max(nEff, 1) // a spread with p̄ at a bound, or below one trial
	lo, hi = WilsonCI(mean, nEff, TQuantile((1+confidence)/2, float64(k-1)))
	return mean, lo, hi, true
}
