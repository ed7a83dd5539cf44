package probes

import (
	"math"
	"sort"
)

// Quantiles summarizes one timer over a window. Percentiles use linear
// interpolation between order statistics (numpy's default, "linear").
type Quantiles struct {
	N    int64   `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	// Approx is set when some values were binned (more than tailCap distinct
	// non-integer or out-of-range values); percentiles are then within a
	// relative error of 2^-11 (0.05%). Integer values in [0, 2^20) are
	// always counted exactly.
	Approx bool `json:"approx,omitempty"`
}

const (
	pageBits  = 12
	pageSize  = 1 << pageBits
	denseMax  = 1 << 20 // integer µs below this are counted in dense pages
	numPages  = denseMax >> pageBits
	tailCap   = 1 << 16 // distinct other values kept exactly before binning
	binShift  = 42      // keep 10 mantissa bits: bins 2^-10 wide, relative
	binMask   = uint64(1)<<binShift - 1
	binMiddle = uint64(1) << (binShift - 1)
)

// counter counts values exactly: integers in [0, denseMax) in lazily
// allocated dense pages, other values in a map of at most tailCap distinct
// keys (then log-binned). Its memory is bounded whatever the stream length:
// at most numPages pages of pageSize int64 plus the bounded map.
type counter struct {
	n      int64
	sum    float64
	pages  [numPages]*[pageSize]int64
	tail   map[float64]int64
	binned bool
	// Exact extremes of the tail values (dense values are exact anyway).
	tailMin, tailMax float64
}

func (c *counter) add(v float64) {
	c.n++
	c.sum += v
	if v >= 0 && v < denseMax {
		iv := int(v)
		if float64(iv) == v {
			p := c.pages[iv>>pageBits]
			if p == nil {
				p = new([pageSize]int64)
				c.pages[iv>>pageBits] = p
			}
			p[iv&(pageSize-1)]++
			return
		}
	}
	c.addTail(v)
}

func binOf(v float64) float64 {
	return math.Float64frombits(math.Float64bits(v)&^binMask | binMiddle)
}

func (c *counter) addTail(v float64) {
	if c.tail == nil {
		c.tail = make(map[float64]int64)
		c.tailMin, c.tailMax = v, v
	}
	c.tailMin, c.tailMax = min(c.tailMin, v), max(c.tailMax, v)
	if c.binned {
		c.tail[binOf(v)]++
		return
	}
	c.tail[v]++
	if len(c.tail) > tailCap {
		old := c.tail
		c.tail = make(map[float64]int64, len(old)/4)
		for k, n := range old {
			c.tail[binOf(k)] += n
		}
		c.binned = true
	}
}

// walk calls f for each distinct value in ascending order with its count,
// until f returns false.
func (c *counter) walk(f func(v float64, n int64) bool) {
	keys := make([]float64, 0, len(c.tail))
	for k := range c.tail {
		keys = append(keys, k)
	}
	sort.Float64s(keys)
	t := 0
	for pi, p := range c.pages {
		if p == nil {
			continue
		}
		for j, n := range p {
			if n == 0 {
				continue
			}
			v := float64(pi<<pageBits | j)
			for ; t < len(keys) && keys[t] < v; t++ {
				if !f(keys[t], c.tail[keys[t]]) {
					return
				}
			}
			if !f(v, n) {
				return
			}
		}
	}
	for ; t < len(keys); t++ {
		if !f(keys[t], c.tail[keys[t]]) {
			return
		}
	}
}

// quantiles computes the summary in one ordered pass.
func (c *counter) quantiles() Quantiles {
	q := Quantiles{N: c.n, Approx: c.binned}
	if c.n == 0 {
		return q
	}
	q.Min, q.Max = c.extremes()
	q.Mean = c.sum / float64(c.n)
	ps := [3]float64{0.50, 0.90, 0.99}
	var ranks [6]int64 // lo, hi per percentile
	for i, p := range ps {
		h := float64(c.n-1) * p
		lo := int64(math.Floor(h))
		ranks[2*i] = lo
		ranks[2*i+1] = min(lo+1, c.n-1)
	}
	var vals [6]float64
	var seen int64 // values before the current one
	c.walk(func(v float64, n int64) bool {
		done := true
		for i, r := range ranks {
			if r >= seen && r < seen+n {
				vals[i] = v
			}
			if r >= seen+n {
				done = false
			}
		}
		seen += n
		return !done
	})
	out := [3]*float64{&q.P50, &q.P90, &q.P99}
	for i, p := range ps {
		h := float64(c.n-1) * p
		frac := h - math.Floor(h)
		*out[i] = lerp(vals[2*i], vals[2*i+1], frac)
	}
	return q
}

// lerp interpolates like numpy's _lerp (stable at both ends).
func lerp(a, b, t float64) float64 {
	d := b - a
	if t >= 0.5 {
		return b - d*(1-t)
	}
	return a + d*t
}

// extremes returns the smallest and largest value counted (n > 0).
func (c *counter) extremes() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	if c.tail != nil {
		lo, hi = c.tailMin, c.tailMax
	}
	for pi := 0; pi < numPages; pi++ {
		if p := c.pages[pi]; p != nil {
			for j, n := range p {
				if n != 0 {
					lo = min(lo, float64(pi<<pageBits|j))
					break
				}
			}
			break
		}
	}
	for pi := numPages - 1; pi >= 0; pi-- {
		if p := c.pages[pi]; p != nil {
			for j := pageSize - 1; j >= 0; j-- {
				if p[j] != 0 {
					hi = max(hi, float64(pi<<pageBits|j))
					break
				}
			}
			break
		}
	}
	return lo, hi
}
