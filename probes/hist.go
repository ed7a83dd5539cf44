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

// counter counts values exactly, in three tiers tried in order:
//
//   - integers in [0, denseMax) (whole µs) in lazily allocated dense pages;
//   - values k/1000 with integer k in [0, nsMax) (µs with ns resolution,
//     as the vLLM plugin writes them: 31.562) in dense pages by k, when
//     float64(k)/1000 is exactly the value (so it is recovered exactly);
//   - other values in a hash table of at most tailCap distinct keys. Past
//     that it bins them (Approx): non-negative values into lazily allocated
//     dense bin pages (one per binary exponent; counting one is a shift and
//     an increment), negative ones into the table.
//
// Dense slots are uint32, half the cache footprint of int64 (the pages are
// touched at random, one per timer per step): a slot would need 2^32 steps
// of one exact value in one window to wrap, 50 days of 1 ms steps.
//
// Its memory is bounded whatever the stream length: at most numPages +
// nsPages pages of pageSize uint32, the bounded table, and at most binPages
// bin pages of binPage int64.
type counter struct {
	n      int64
	sum    float64
	lo, hi float64                     // exact extremes (valid when n > 0)
	pages  [numPages]*[pageSize]uint32 // whole µs
	nsPgs  [nsPages]*[pageSize]uint32  // k/1000 µs
	tail   *valueTable                 // exact values; once binned, negative bins only
	binned bool
	bins   *[binPages]*[binPage]int64 // non-negative bins, by exponent
}

const (
	binPageBits = 64 - binShift - 12 // mantissa bits kept: slots per page
	binPage     = 1 << binPageBits
	binPages    = 1 << 11 // one page per exponent of a non-negative float64
	nsScale     = 1000    // the second tier's unit: 1/1000 µs
	// nsMax bounds the second tier (k < nsMax: values below 65.536 µs) so
	// its pages stay cache-sized (512 KiB); larger ns-resolution values are
	// mostly distinct and soon binned.
	nsMax   = 1 << 16
	nsPages = nsMax >> pageBits
)

func (c *counter) add(v float64) {
	if c.n == 0 {
		c.lo, c.hi = v, v
	}
	c.n++
	c.sum += v
	if v < c.lo { // plain compares: no NaN here, cheaper than min/max
		c.lo = v
	} else if v > c.hi {
		c.hi = v
	}
	if v >= 0 && v < denseMax {
		iv := int(v)
		if float64(iv) == v {
			countDense(c.pages[:], iv)
			return
		}
		if v < nsMax/nsScale {
			k := int(v*nsScale + 0.5)
			if float64(k)/nsScale == v {
				countDense(c.nsPgs[:], k)
				return
			}
		}
	}
	c.addTail(v)
}

func countDense(pages []*[pageSize]uint32, i int) {
	p := pages[i>>pageBits]
	if p == nil {
		p = new([pageSize]uint32)
		pages[i>>pageBits] = p
	}
	p[i&(pageSize-1)]++
}

func binOf(v float64) float64 {
	return math.Float64frombits(math.Float64bits(v)&^binMask | binMiddle)
}

func (c *counter) addTail(v float64) {
	if c.tail == nil {
		c.tail = new(valueTable)
	}
	if c.binned {
		c.addBin(v, 1)
		return
	}
	c.tail.add(v, 1)
	if c.tail.len() > tailCap {
		old := c.tail
		c.tail = new(valueTable)
		c.binned = true
		old.each(c.addBin)
	}
}

// addBin counts n values v in v's bin.
func (c *counter) addBin(v float64, n int64) {
	key := math.Float64bits(v) >> binShift
	if key>>(binPageBits+11) != 0 { // sign bit: negative
		c.tail.add(binOf(v), n)
		return
	}
	if c.bins == nil {
		c.bins = new([binPages]*[binPage]int64)
	}
	pg := c.bins[key>>binPageBits]
	if pg == nil {
		pg = new([binPage]int64)
		c.bins[key>>binPageBits] = pg
	}
	pg[key&(binPage-1)] += n
}

// valueCount is one distinct value (or bin) and its count.
type valueCount struct {
	v float64
	n int64
}

// densePages lists the non-empty slots of dense pages in ascending order,
// slot i standing for the value i/scale.
func densePages(pages []*[pageSize]uint32, scale float64) []valueCount {
	var out []valueCount
	for pi, p := range pages {
		if p == nil {
			continue
		}
		for j, n := range p {
			if n != 0 {
				out = append(out, valueCount{float64(pi<<pageBits|j) / scale, int64(n)})
			}
		}
	}
	return out
}

// walk calls f for each distinct value (or bin) in ascending order with its
// count, until f returns false.
func (c *counter) walk(f func(v float64, n int64) bool) {
	// Tail values (sorted), then bins (ascending, all ≥ 0, after the
	// negative ones): together one sorted list.
	var others []valueCount
	if c.tail != nil {
		others = make([]valueCount, 0, c.tail.len())
		c.tail.each(func(v float64, n int64) { others = append(others, valueCount{v, n}) })
		sort.Slice(others, func(i, j int) bool { return others[i].v < others[j].v })
	}
	if c.bins != nil {
		for pi, pg := range c.bins {
			if pg == nil {
				continue
			}
			for j, n := range pg {
				if n != 0 {
					key := uint64(pi)<<binPageBits | uint64(j)
					others = append(others, valueCount{math.Float64frombits(key<<binShift | binMiddle), n})
				}
			}
		}
	}
	mergeWalk([][]valueCount{densePages(c.pages[:], 1), densePages(c.nsPgs[:], nsScale), others}, f)
}

// mergeWalk calls f for the values of the ascending lists in ascending
// order, until f returns false.
func mergeWalk(lists [][]valueCount, f func(v float64, n int64) bool) {
	for {
		best := -1
		for i, l := range lists {
			if len(l) > 0 && (best < 0 || l[0].v < lists[best][0].v) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		x := lists[best][0]
		lists[best] = lists[best][1:]
		if !f(x.v, x.n) {
			return
		}
	}
}

// quantiles computes the summary in one ordered pass.
func (c *counter) quantiles() Quantiles { return c.quantilesOf(c.walk) }

// quantilesOf is quantiles over the values walk yields in ascending order
// (c's own, or a merge of several counters whose totals c holds).
func (c *counter) quantilesOf(walk func(func(v float64, n int64) bool)) Quantiles {
	q := Quantiles{N: c.n, Approx: c.binned}
	if c.n == 0 {
		return q
	}
	q.Min, q.Max = c.lo, c.hi
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
	walk(func(v float64, n int64) bool {
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

// mergedQuantiles summarizes the union of the values counted by cs (the
// per-path counters of one timer). One counter is summarized directly; for
// more, each one's ordered values are merged in one pass.
func mergedQuantiles(cs []*counter) Quantiles {
	if len(cs) == 1 {
		return cs[0].quantiles()
	}
	var m counter
	lists := make([][]valueCount, len(cs))
	for i, c := range cs {
		c.walk(func(v float64, n int64) bool {
			lists[i] = append(lists[i], valueCount{v, n})
			return true
		})
		if m.n == 0 || c.lo < m.lo {
			m.lo = c.lo
		}
		if m.n == 0 || c.hi > m.hi {
			m.hi = c.hi
		}
		m.n += c.n
		m.sum += c.sum
		m.binned = m.binned || c.binned
	}
	// m holds no values itself: walk the merged lists in its place.
	return m.quantilesOf(func(f func(v float64, n int64) bool) { mergeWalk(lists, f) })
}
