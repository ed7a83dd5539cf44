// Package stats owns the statistics every other package uses: the
// percentile definition (numpy's "linear", as vllm bench serve), means,
// standard deviations and Student-t confidence intervals, Holm's
// correction, the Kolmogorov–Smirnov test and the binomial tail. Keeping one
// definition of each is what makes a summary, a self-grading and a report
// agree.
package stats

import (
	"math"
	"sort"
	"sync"

	"gonum.org/v1/gonum/stat/distuv"
)

// Percentile returns the p-th percentile (0 ≤ p ≤ 100) of xs by linear
// interpolation between the closest ranks, as numpy.percentile does by
// default (method "linear"): with xs sorted ascending and h = (n−1)·p/100, the
// result is xs[⌊h⌋] + (h−⌊h⌋)·(xs[⌊h⌋+1] − xs[⌊h⌋]). It returns NaN for an
// empty slice or a p outside [0, 100]. xs is not modified. It is
// PercentileSorted on a sorted copy.
func Percentile(xs []float64, p float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return PercentileSorted(s, p)
}

// Mean is the arithmetic mean; NaN for an empty slice.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// SampleStd is the sample standard deviation (n−1 denominator); NaN for n < 2.
func SampleStd(xs []float64) float64 {
	if len(xs) < 2 {
		return math.NaN()
	}
	return math.Sqrt(sumSquares(xs) / float64(len(xs)-1))
}

// PopStd is the population standard deviation (n denominator, numpy's
// np.std default, which vllm bench serve reports as std_*_ms).
func PopStd(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return math.Sqrt(sumSquares(xs) / float64(len(xs)))
}

// sumSquares is the sum of the squared deviations of xs from their mean.
func sumSquares(xs []float64) (ss float64) {
	m := Mean(xs)
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return ss
}

// TQuantile is the q-quantile of Student's t with nu degrees of freedom.
// Values are kept per (q, nu): the stopping rule and the design's
// simulations ask for the same few thousands of times, and each is an
// inverse incomplete beta function.
func TQuantile(q, nu float64) float64 {
	k := tqKey{q, nu}
	tq.mu.Lock()
	v, ok := tq.m[k]
	tq.mu.Unlock()
	if ok {
		return v
	}
	v = distuv.StudentsT{Mu: 0, Sigma: 1, Nu: nu}.Quantile(q)
	tq.mu.Lock()
	if len(tq.m) < tqMax {
		tq.m[k] = v
	}
	tq.mu.Unlock()
	return v
}

type tqKey struct{ q, nu float64 }

// tqMax bounds TQuantile's cache (a process asks for a few confidence
// levels at degrees of freedom up to its number of runs).
const tqMax = 1 << 14

var tq = struct {
	mu sync.Mutex
	m  map[tqKey]float64
}{m: map[tqKey]float64{}}

// TTwoSidedP is the two-sided p-value of statistic t under Student's t with
// nu degrees of freedom.
func TTwoSidedP(t, nu float64) float64 {
	if math.IsInf(t, 0) {
		return 0
	}
	return 2 * distuv.StudentsT{Mu: 0, Sigma: 1, Nu: nu}.Survival(math.Abs(t))
}

// MeanCI returns the mean of xs and the half-width of its two-sided Student-t
// confidence interval at the given confidence (for example 0.95):
// half = t_{(1+c)/2, n−1} · s/√n with s the sample standard deviation. With
// fewer than two values the half-width is NaN (no interval exists), and with
// none the mean is NaN too. A confidence outside (0, 1) gives a NaN
// half-width.
func MeanCI(xs []float64, confidence float64) (mean, half float64) {
	mean = Mean(xs)
	n := len(xs)
	if n < 2 || !(confidence > 0 && confidence < 1) {
		return mean, math.NaN()
	}
	t := TQuantile((1+confidence)/2, float64(n-1))
	return mean, t * SampleStd(xs) / math.Sqrt(float64(n))
}

// CV is the coefficient of variation of xs: sample standard deviation over
// the absolute mean. NaN with fewer than two values or a zero mean.
func CV(xs []float64) float64 {
	m := Mean(xs)
	if len(xs) < 2 || m == 0 {
		return math.NaN()
	}
	return SampleStd(xs) / math.Abs(m)
}

// Holm returns Holm–Bonferroni adjusted p-values, in the order of ps: sorted
// ascending, the i-th smallest (0-based) of m becomes max over j ≤ i of
// min(1, (m−j)·p_(j)). Rejecting where the adjusted p < α controls the
// family-wise error rate at α. NaN entries (no test possible) stay NaN and do
// not count towards m.
func Holm(ps []float64) []float64 {
	out := make([]float64, len(ps))
	idx := make([]int, 0, len(ps))
	for i, p := range ps {
		out[i] = math.NaN()
		if !math.IsNaN(p) {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return ps[idx[a]] < ps[idx[b]] })
	m := len(idx)
	running := 0.0
	for j, i := range idx {
		adj := math.Min(1, float64(m-j)*ps[i])
		running = math.Max(running, adj)
		out[i] = running
	}
	return out
}

// Converged reports whether the relative half-width of the Student-t CI of
// the mean of values (half-width / |mean|) is at most relCI — the stopping
// rule of docs/design.md ("Stopping rule") for a sweep without
// comparisons. relHalf is that relative half-width; it is NaN, and ok
// false, with fewer than two values or a zero mean.
func Converged(values []float64, relCI, confidence float64) (ok bool, relHalf float64) {
	m, half := MeanCI(values, confidence)
	if len(values) < 2 || m == 0 || math.IsNaN(half) {
		return false, math.NaN()
	}
	relHalf = half / math.Abs(m)
	return relHalf <= relCI, relHalf
}
