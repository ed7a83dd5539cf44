package plan

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/results"
)

// Search is one step of the bracketing search of one config and shape,
// decided from its finished probes alone: the rates to probe next, or none
// and how the search ended.
//
//  1. Probe lo and hi.
//  2. While nothing fails, double the highest rate (at most expand times
//     beyond hi); while nothing holds below the lowest failure, halve the
//     lowest rate (at most expand times below lo).
//  3. Then the capacity is in [Lo, Hi] (highest rate that held, lowest that
//     failed). Probes whose CI straddled the limit form the uncertain band
//     inside it; bisect (geometrically) the gaps Lo..band and band..Hi, or
//     Lo..Hi without a band, until each is within 1+tolerance.
//
// A probe without usable data (fewer than two of its runs ok or saturated:
// the others failed for reasons that say nothing about the SLO) is treated
// as uncertain (results.AnalyzeCapacity puts it in the band); when no probe
// has usable data the search stops: more probes would not fix the harness.
func Search(c *matrices.Capacity, s *results.CapacitySearch) ([]float64, string) {
	if len(s.Probes) == 0 {
		return []float64{c.Lo, c.Hi}, ""
	}
	if !slices.ContainsFunc(s.Probes, func(p results.CapacityProbe) bool { return p.Verdict != results.ProbeNoData }) {
		return nil, fmt.Sprintf("stopped: no probed rate gave usable data (%s)", s.Probes[0].Note)
	}
	if len(s.Probes) >= c.MaxProbes {
		return nil, fmt.Sprintf("stopped at max_probes (%d)", c.MaxProbes)
	}
	probed := map[float64]bool{}
	for _, p := range s.Probes {
		probed[p.Rate] = true
	}
	lowest, highest := s.Probes[0].Rate, s.Probes[len(s.Probes)-1].Rate
	scale := math.Pow(2, float64(c.Expand))
	level := c.Concurrency() // whole in-flight levels, at least 1
	if s.Hi == nil {
		next := roundRate(2*highest, 3)
		if level {
			next = math.Round(2 * highest)
		}
		if next <= c.Hi*scale*(1+1e-9) && !probed[next] {
			return []float64{next}, ""
		}
		return nil, fmt.Sprintf("nothing failed up to %g (hi × 2^expand): the capacity is at least the highest %s that held", highest, unit(c))
	}
	if s.Lo == nil {
		next := roundRate(lowest/2, 3)
		if level {
			next = math.Floor(lowest / 2)
		}
		if next >= c.Lo/scale*(1-1e-9) && (!level || next >= 1) && !probed[next] {
			return []float64{next}, ""
		}
		return nil, fmt.Sprintf("nothing held down to %g (lo / 2^expand): the capacity is below it", lowest)
	}
	segs := [][2]float64{{*s.Lo, *s.Hi}}
	if s.BandLo != nil {
		segs = [][2]float64{{*s.Lo, *s.BandLo}, {*s.BandHi, *s.Hi}}
	}
	for _, g := range segs {
		if g[1] <= g[0]*(1+c.Tolerance) || level && g[1]-g[0] <= 1 {
			continue
		}
		mid := between
		if level {
			mid = betweenLevels
		}
		if r, ok := mid(g[0], g[1]); ok && !probed[r] {
			return []float64{r}, ""
		}
	}
	if s.BandLo != nil {
		return nil, fmt.Sprintf("bracketed: each end within %g%% of the uncertain band, where the noise of %d blocks cannot decide", 100*c.Tolerance, c.Blocks)
	}
	return nil, fmt.Sprintf("bracketed within %g%%", 100*c.Tolerance)
}

// betweenLevels is the whole number nearest the geometric midpoint of a
// and b, strictly inside (a, b).
func betweenLevels(a, b float64) (float64, bool) {
	r := math.Round(math.Sqrt(a * b))
	r = math.Min(math.Max(r, math.Floor(a)+1), math.Ceil(b)-1)
	return r, r > a && r < b
}

// unit is what the search varies, in words.
func unit(c *matrices.Capacity) string {
	if c.Concurrency() {
		return "in-flight level"
	}
	return "rate"
}

// between is the geometric midpoint of a and b, rounded to the fewest
// significant digits (3 to 8) that keep it strictly inside (a, b).
func between(a, b float64) (float64, bool) {
	m := math.Sqrt(a * b)
	for d := 3; d <= 8; d++ {
		if r := roundRate(m, d); r > a && r < b {
			return r, true
		}
	}
	return 0, false
}

// roundRate rounds x to d significant digits (rates read well in reports
// and cell ids do not carry float noise).
func roundRate(x float64, d int) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', d, 64), 64)
	if err != nil {
		return x
	}
	return r
}
