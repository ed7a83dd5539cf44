package results

import (
	"cmp"
	"maps"
	"math"
	"slices"

	"github.com/mbench/mbench/stats"
)

// CellSummary is cells/<id>/summary_A.json: a cell across its runs.
type CellSummary struct {
	Cell       string  `json:"cell"`
	Config     string  `json:"config"`
	Shape      string  `json:"shape"`
	Rate       float64 `json:"rate"`
	SameAs     string  `json:"same_as,omitempty"`
	Simulated  bool    `json:"simulated"`
	Engine     string  `json:"engine,omitempty"`
	Confidence float64 `json:"confidence"`
	NRuns      int     `json:"n_runs"` // usable (ok) runs, the ones the statistics are over
	// SaturatedRuns and ClientLimitedRuns count every run of the cell that
	// was graded so (whatever its verdict: a saturated run is never used),
	// Verdicts every run by its verdict.
	SaturatedRuns     int                    `json:"saturated_runs"`
	ClientLimitedRuns int                    `json:"client_limited_runs"`
	Verdicts          VerdictCounts          `json:"verdicts"`
	Metrics           map[string]MetricStats `json:"metrics"`
	Runs              []CellRun              `json:"runs"`
	MissingBlocks     []int                  `json:"missing_blocks"`
}

// MetricStats is one metric of a cell across runs: the mean, its Student-t
// CI, the CV, and the per-run values with their blocks. Statistics that do
// not exist (fewer than two runs, zero mean) are null.
type MetricStats struct {
	Mean         *float64  `json:"mean"`
	CILo         *float64  `json:"ci_lo"`
	CIHi         *float64  `json:"ci_hi"`
	HalfWidth    *float64  `json:"half_width"`
	RelHalfWidth *float64  `json:"rel_half_width"`
	CV           *float64  `json:"cv"`
	N            int       `json:"n"`
	Values       []float64 `json:"values"`
	Blocks       []int     `json:"blocks"`
	// Interval is how ci_lo/ci_hi were made: "" for the Student-t interval
	// of the mean, IntervalWilson for a proportion's (stats.ProportionCI).
	Interval string `json:"interval,omitempty"`
}

// IntervalWilson marks a proportion's interval: Wilson's, on the effective
// number of requests that the spread between blocks implies.
const IntervalWilson = "wilson_effective_n"

// CellRun is one run of a cell as listed in its cell summary.
type CellRun struct {
	Block               int     `json:"block"`
	Status              Verdict `json:"status"`
	Reason              string  `json:"reason,omitempty"`
	Dir                 string  `json:"dir"`
	Used                bool    `json:"used"` // counted in the statistics
	Saturated           bool    `json:"saturated"`
	SaturationReason    string  `json:"saturation_reason,omitempty"`
	ClientLimited       bool    `json:"client_limited"`
	ClientLimitedReason string  `json:"client_limited_reason,omitempty"`
}

// summarizeCell computes a cell's across-run statistics.
func summarizeCell(c *Cell, s *Sweep, blocks int) CellSummary {
	cs := CellSummary{
		Cell: c.Info.ID, Config: c.Info.Config, Shape: c.Info.Shape, Rate: c.Info.Rate,
		SameAs: c.Info.SameAs, Simulated: s.Simulated, Confidence: s.Confidence,
		Metrics: map[string]MetricStats{}, Runs: []CellRun{}, MissingBlocks: []int{}, Verdicts: VerdictCounts{},
	}
	for _, r := range c.Runs {
		cr := CellRun{Block: r.Ref.Block, Status: r.Ref.Status, Reason: cmp.Or(r.Ref.Reason, r.Problem), Dir: r.Ref.Dir, Used: r.IsResult()}
		if r.Sum != nil {
			cr.Saturated = r.Sum.Saturated || r.Ref.Status == VerdictSaturated
			cr.SaturationReason = r.Sum.SaturationReason
			if cr.Saturated && cr.SaturationReason == "" {
				cr.SaturationReason = r.Ref.Reason
			}
			cr.ClientLimited, cr.ClientLimitedReason = r.Sum.ClientLimited, r.Sum.ClientLimitedReason
			cs.Engine = cmp.Or(cs.Engine, r.Sum.Engine)
		}
		if cr.Used {
			cs.NRuns++
		}
		if cr.Saturated {
			cs.SaturatedRuns++
		}
		if cr.ClientLimited || r.Ref.Status == VerdictClientLimited {
			cs.ClientLimitedRuns++
		}
		cs.Verdicts[r.Ref.Status]++
		cs.Runs = append(cs.Runs, cr)
	}
	for b := 1; b <= blocks; b++ {
		if c.Used[b] == nil {
			cs.MissingBlocks = append(cs.MissingBlocks, b)
		}
	}
	keys := map[string]bool{}
	for _, r := range c.Used {
		for k := range r.Metrics {
			keys[k] = true
		}
	}
	for k := range keys {
		ms := metricStats(byBlock(c.Used, k), s.Confidence)
		if trials, ok := c.trialsByBlock(k); ok {
			ms.proportion(trials, s.Confidence)
		}
		cs.Metrics[k] = ms
	}
	return cs
}

// byBlock is block → value of metric key over runs (block → run).
func byBlock(runs map[int]*Run, key string) map[int]float64 {
	out := map[int]float64{}
	for b, r := range runs {
		if v, ok := r.Metrics[key]; ok {
			out[b] = v
		}
	}
	return out
}

// trialsByBlock is block → the trials behind proportion metric key in each
// used run (proportionTrials); false when key is not such a proportion or
// a run lacks its count.
func (c *Cell) trialsByBlock(key string) (map[int]float64, bool) {
	out := map[int]float64{}
	for b, r := range c.Used {
		if _, has := r.Metrics[key]; !has {
			continue
		}
		n, ok := proportionTrials(r.Sum, key)
		if !ok {
			return nil, false
		}
		out[b] = n
	}
	return out, len(out) > 0
}

// proportion replaces ms's Student-t interval with the effective-n Wilson
// interval of stats.ProportionCI over the same blocks, trials the count
// behind each block's value; the half-width becomes half the interval's
// width (it is not symmetric about the mean).
func (ms *MetricStats) proportion(trials map[int]float64, confidence float64) {
	tr := make([]float64, len(ms.Blocks))
	for i, b := range ms.Blocks {
		tr[i] = trials[b]
	}
	_, lo, hi, ok := stats.ProportionCI(ms.Values, tr, confidence)
	if !ok {
		return
	}
	ms.CILo, ms.CIHi, ms.HalfWidth = ptr(lo), ptr(hi), ptr((hi-lo)/2)
	ms.RelHalfWidth = nil
	if *ms.Mean != 0 {
		ms.RelHalfWidth = ptr(*ms.HalfWidth / math.Abs(*ms.Mean))
	}
	ms.Interval = IntervalWilson
}

// Saturated reports whether any run of the cell was graded Saturated.
func (c *Cell) Saturated() bool { return c.Sum.SaturatedRuns > 0 }

// metricStats computes mean, CI and CV of per-block values.
func metricStats(byBlock map[int]float64, confidence float64) MetricStats {
	ms := MetricStats{Values: []float64{}, Blocks: slices.AppendSeq([]int{}, maps.Keys(byBlock))}
	slices.Sort(ms.Blocks)
	for _, b := range ms.Blocks {
		ms.Values = append(ms.Values, byBlock[b])
	}
	ms.N = len(ms.Values)
	m, half := stats.MeanCI(ms.Values, confidence)
	ms.Mean, ms.HalfWidth = ptr(m), ptr(half)
	ms.CILo, ms.CIHi = ptr(m-half), ptr(m+half)
	if m != 0 {
		ms.RelHalfWidth = ptr(half / math.Abs(m))
	}
	ms.CV = ptr(stats.CV(ms.Values))
	return ms
}
