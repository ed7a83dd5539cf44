package results

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mbench/mbench/stats"
)

// Bound is one constraint of a capacity search: a latency metric at or
// below MaxMs, or a rate or share (request_goodput, slo_attainment,
// request_throughput, output_throughput) at or above Min. A probe holds
// when every bound holds; each block's crossing is where the tightest
// bound's slack reaches 0. A matrix's capacity.constraints decode into
// Bounds (matrices checks them against the registry).
type Bound struct {
	Metric string   `json:"metric"`
	MaxMs  *float64 `json:"max_ms,omitempty"`
	Min    *float64 `json:"min,omitempty"`
}

// BoundedBelow are the metrics a bound holds at or above its Min, each
// with what the bound is; every latency statistic (LatencyStat) is
// bounded above, at or below MaxMs.
var BoundedBelow = []struct {
	Metric
	Means string
}{
	{Goodput, "req/s of requests that met the slo section"},
	{SLOAttainment, "the share of requests that met the slo section, 0 to 1"},
	{RequestThroughput, "completed req/s"},
	{OutputThroughput, "output tokens/s"},
}

// BoundedBelowMeans is what a bound at or above Min on the metric key
// is, and false when key is no metric of BoundedBelow.
func BoundedBelowMeans(key string) (string, bool) {
	for _, b := range BoundedBelow {
		if b.Key == key {
			return b.Means, true
		}
	}
	return "", false
}

// String is the bound in words: "ttft_p90 ≤ 500 ms", "slo_attainment ≥ 0.9".
func (b Bound) String() string {
	if b.MaxMs != nil {
		return fmt.Sprintf("%s ≤ %g ms", b.Metric, *b.MaxMs)
	}
	if b.Min != nil {
		return fmt.Sprintf("%s ≥ %g", b.Metric, *b.Min)
	}
	return b.Metric
}

// Limit is the bound's value.
func (b Bound) Limit() float64 {
	if l := cmp.Or(b.MaxMs, b.Min); l != nil {
		return *l
	}
	return math.NaN()
}

// slack is how far v is inside the bound, as a fraction of it: ≥ 0 when v
// meets it (a value equal to the bound meets it), < 0 when not.
func (b Bound) slack(v float64) float64 {
	if b.MaxMs != nil {
		return (*b.MaxMs - v) / *b.MaxMs
	}
	return (v - *b.Min) / *b.Min
}

// Constraints are the spec's bounds: Bounds, or the one of Metric and MaxMs
// (a search recorded before several were possible).
func (s CapacitySpec) Constraints() []Bound {
	if len(s.Bounds) > 0 {
		return s.Bounds
	}
	return []Bound{{Metric: s.Metric, MaxMs: new(s.MaxMs)}}
}

// BoundsText is the spec's constraints in words, joined with commas.
func (s CapacitySpec) BoundsText() string {
	bs := s.Constraints()
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = b.String()
	}
	return strings.Join(parts, ", ")
}

// Unit is what the search varies, for tables: req/s, or requests in
// flight for a search over concurrency.
func (s CapacitySpec) Unit() string {
	if s.Over == "concurrency" {
		return "in flight"
	}
	return "req/s"
}

// ProbeBound is what one bound says of a probe: the mean over its ok
// blocks of the bound's metric, its t-CI, and the bound's own verdict.
type ProbeBound struct {
	Metric  string       `json:"metric"`
	Mean    *float64     `json:"mean,omitempty"`
	CILo    *float64     `json:"ci_lo,omitempty"`
	CIHi    *float64     `json:"ci_hi,omitempty"`
	Verdict ProbeVerdict `json:"verdict"`
	Note    string       `json:"note,omitempty"`
}

// judgeBound is one bound's verdict on a probe from the ok blocks' values
// of its metric and the saturated blocks' count.
func judgeBound(b Bound, vals []float64, sat int, confidence float64) ProbeBound {
	pb := ProbeBound{Metric: b.Metric}
	if len(vals) > 0 {
		mean, half := stats.MeanCI(vals, confidence)
		pb.Mean = &mean
		if !math.IsNaN(half) {
			lo, hi := mean-half, mean+half
			pb.CILo, pb.CIHi = &lo, &hi
		}
	}
	pb.Verdict, pb.Note = boundVerdict(b, vals, sat, pb.CILo, pb.CIHi)
	return pb
}

// boundVerdict decides one bound from the ok values, the saturated count
// and the CI of the values' mean (nil with fewer than two): a saturated
// block fails every bound.
func boundVerdict(b Bound, vals []float64, sat int, lo, hi *float64) (ProbeVerdict, string) {
	n := len(vals) + sat
	meets := func(v float64) bool { return b.slack(v) >= 0 }
	switch {
	case n < 2 || (sat == 0 && (lo == nil || hi == nil)):
		return ProbeNoData, fmt.Sprintf("%d blocks count (ok or saturated); a CI needs two", n)
	case sat == n:
		return ProbeFails, ""
	case sat > 0:
		if slices.ContainsFunc(vals, meets) {
			return ProbeUncertain, fmt.Sprintf("%d of %d blocks saturated, others held", sat, n)
		}
		return ProbeFails, ""
	case b.MaxMs != nil && meets(*hi), b.MaxMs == nil && meets(*lo):
		return ProbeHolds, ""
	case b.MaxMs != nil && !meets(*lo), b.MaxMs == nil && !meets(*hi):
		return ProbeFails, ""
	}
	return ProbeUncertain, "the CI of " + b.Metric + " straddles its bound"
}

// combineVerdicts is a probe's verdict from its bounds': it fails when any
// bound fails, holds when every bound holds, and is otherwise uncertain
// (or no_data when a bound has none).
func combineVerdicts(pbs []ProbeBound) (ProbeVerdict, string) {
	var notes []string
	v := ProbeHolds
	for _, pb := range pbs {
		switch pb.Verdict {
		case ProbeFails:
			return ProbeFails, ""
		case ProbeNoData:
			v = ProbeNoData
		case ProbeUncertain:
			if v != ProbeNoData {
				v = ProbeUncertain
			}
		}
		if pb.Note != "" && (len(notes) == 0 || notes[len(notes)-1] != pb.Note) {
			notes = append(notes, pb.Note)
		}
	}
	if v == ProbeHolds {
		return v, ""
	}
	return v, strings.Join(notes, "; ")
}
