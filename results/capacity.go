package results

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/mbench/mbench/stats"
)

// CapacityFile is the capacity search's result in a sweep directory.
const CapacityFile = "capacity.json"

// CapacitySpec is what a capacity search holds each config to, and how it
// decides: every bound of Bounds (or Metric ≤ MaxMs, a search with one),
// judged by a Student-t CI at Confidence over the blocks of each probed
// rate — or in-flight level, when Over is concurrency.
type CapacitySpec struct {
	Metric     string   `json:"metric"`
	MaxMs      float64  `json:"max_ms"`
	Bounds     []Bound  `json:"bounds,omitempty"`
	Over       string   `json:"over,omitempty"` // rate ("") or concurrency
	Lo         float64  `json:"lo"`
	Hi         float64  `json:"hi"`
	Tolerance  float64  `json:"tolerance"`
	Blocks     int      `json:"blocks"`
	Confidence float64  `json:"confidence"`
	Baseline   string   `json:"baseline"`
	Configs    []string `json:"configs"` // matrix order
	Shapes     []string `json:"shapes"`  // matrix order
}

// CapacityRun is one journaled run of a probed rate: its cell (Attempt > 0
// is a re-run of a block that gave no usable run before), block and
// verdict. Value is the metric when the run's verdict is ok.
type CapacityRun struct {
	CellInfo
	Block  int
	Status Verdict
	Value  float64            // the first bound's metric
	Values map[string]float64 // every bound's metric (nil: Value is the only one)
}

// value is the run's value of bound i's metric (NaN when missing).
func (r CapacityRun) value(i int, b Bound) float64 {
	if r.Values == nil && i == 0 {
		return r.Value
	}
	if v, ok := r.Values[b.Metric]; ok {
		return v
	}
	return math.NaN()
}

// counts reports whether the run says something about the SLO: ok with a
// value of every bound's metric, or saturated.
func (r CapacityRun) counts(bounds []Bound) bool {
	if r.Status == VerdictSaturated {
		return true
	}
	if r.Status != VerdictOK {
		return false
	}
	for i, b := range bounds {
		if math.IsNaN(r.value(i, b)) {
			return false
		}
	}
	return true
}

// ProbeVerdict is what the blocks of one probed rate say about the SLO.
type ProbeVerdict string

// The probe verdicts.
const (
	// ProbeHolds: the CI of the metric's mean lies at or below the limit,
	// and no block saturated.
	ProbeHolds ProbeVerdict = "holds"
	// ProbeFails: the CI lies above the limit, or every counted block
	// saturated, or some saturated and every other exceeded the limit.
	ProbeFails ProbeVerdict = "fails"
	// ProbeUncertain: the CI straddles the limit (or saturated and
	// holding blocks are mixed): the rate is in the noise band.
	ProbeUncertain ProbeVerdict = "uncertain"
	// ProbeNoData: fewer than two blocks count (ok or saturated); the
	// others failed for reasons that say nothing about the SLO. Inside the
	// bracket it belongs to the uncertain band.
	ProbeNoData ProbeVerdict = "no_data"
)

// Decided reports whether the probe says holds or fails with confidence.
func (v ProbeVerdict) Decided() bool { return v == ProbeHolds || v == ProbeFails }

// CapacityProbe is one probed rate of one search with what its blocks say.
type CapacityProbe struct {
	Rate    float64        `json:"rate"`
	Cell    string         `json:"cell"`
	Verdict ProbeVerdict   `json:"verdict"`
	N       int            `json:"n"`                // blocks that count: ok or saturated
	Mean    *float64       `json:"mean,omitempty"`   // of the ok blocks' metric (the first bound's)
	CILo    *float64       `json:"ci_lo,omitempty"`  // t-CI of Mean
	CIHi    *float64       `json:"ci_hi,omitempty"`  //
	Bounds  []ProbeBound   `json:"bounds,omitempty"` // each bound's verdict, with several
	Runs    []CapacityCell `json:"runs"`             // by block
	Note    string         `json:"note,omitempty"`   // why undecided, when it is
	Blocks  int            `json:"blocks,omitempty"` // blocks journaled
}

// CapacityCell is one block of a probe: its verdict and, when ok, the
// metric; of its attempts (runs of the block, Attempts in all), the first
// that counts (ok or saturated), else the last.
type CapacityCell struct {
	Block    int      `json:"block"`
	Status   Verdict  `json:"status"`
	Value    *float64 `json:"value,omitempty"`
	Attempts int      `json:"attempts,omitempty"`
	// Slack is how far inside the tightest bound the block's run was
	// (Bound.slack; < 0: outside); absent when it does not count or is
	// saturated.
	Slack *float64 `json:"slack,omitempty"`
}

// Counts reports whether the block says something about the SLO: ok with a
// value, or saturated.
func (c CapacityCell) Counts() bool { return c.Value != nil || c.Status == VerdictSaturated }

// CapacitySearch is the result of one config's (and shape's) search. The
// capacity lies in [Lo, Hi]: Lo is the highest rate that held below every
// rate that failed, Hi the lowest rate that failed. A nil Lo means no rate
// held (the capacity is below the lowest probed); a nil Hi that none failed
// (it is at least Lo). BandLo..BandHi are the probed rates inside the
// interval whose CI straddled the limit: the part of the interval that more
// blocks, not more probes, would narrow.
type CapacitySearch struct {
	Config string          `json:"config"`
	Shape  string          `json:"shape"`
	Probes []CapacityProbe `json:"probes"` // by rate
	Lo     *float64        `json:"lo"`
	Hi     *float64        `json:"hi"`
	BandLo *float64        `json:"band_lo,omitempty"`
	BandHi *float64        `json:"band_hi,omitempty"`
	// PerBlockCrossing is what each block's runs say of its own crossing
	// of the limit: between the block's highest rate at or under the limit
	// and its lowest rate above it; interpolated between the two probes'
	// values where both were measured, and otherwise (the failing probe
	// saturated: no value to interpolate) only known to lie in that
	// bracket — interval-censored. Blocks whose crossing is outside the
	// probed rates are left out. The CIs and the paired comparisons use it.
	PerBlockCrossing map[int]Crossing `json:"per_block_crossing"`
	// PerBlock is each block's point: the interpolation, or a censored
	// bracket's geometric midpoint (for display; the CIs use the bracket).
	PerBlock map[int]float64 `json:"per_block"`
	// Estimate is the geometric mean of PerBlock; EstLo..EstHi its CI from
	// the crossings (CensoredCI); nil with fewer than two blocks.
	Estimate *float64 `json:"estimate,omitempty"`
	EstLo    *float64 `json:"estimate_ci_lo,omitempty"`
	EstHi    *float64 `json:"estimate_ci_hi,omitempty"`
	// NonMonotone lists rates that held above a rate that failed (noise or
	// a non-monotone engine); they are not used for Lo.
	NonMonotone []float64 `json:"non_monotone,omitempty"`
	Note        string    `json:"note,omitempty"` // how the search ended
}

// Crossing is one block's crossing of the limit (req/s): between the
// probes Lo and Hi, at Point; Censored when only the bracket is known (the
// probe above the limit saturated), so that the crossing may lie anywhere
// in [Lo, Hi].
type Crossing struct {
	Lo       float64 `json:"lo"`
	Hi       float64 `json:"hi"`
	Point    float64 `json:"point"`
	Censored bool    `json:"censored"`
}

// bounds is the interval the crossing is taken to lie in: the bracket when
// censored, else the interpolated point.
func (c Crossing) bounds() (float64, float64) {
	if c.Censored {
		return c.Lo, c.Hi
	}
	return c.Point, c.Point
}

// CapacityComparison is one config's capacity against the baseline's at
// the same shape, paired by block from the two searches' brackets
// (CompareBrackets): "sustains 12% less load [−15, −9]".
type CapacityComparison struct {
	Config   string `json:"config"`
	Baseline string `json:"baseline"`
	Shape    string `json:"shape"`
	Note     string `json:"note,omitempty"`
	Comparison
}

// CapacityReport is capacity.json.
type CapacityReport struct {
	Simulated   bool                 `json:"simulated"`
	Spec        CapacitySpec         `json:"spec"`
	Searches    []CapacitySearch     `json:"searches"`
	Comparisons []CapacityComparison `json:"comparisons"`
	Stop        string               `json:"stop,omitempty"`
}

// Search returns the search of config and shape, nil when there is none.
func (r *CapacityReport) Search(config, shape string) *CapacitySearch {
	if i := slices.IndexFunc(r.Searches, func(s CapacitySearch) bool { return s.Config == config && s.Shape == shape }); i >= 0 {
		return &r.Searches[i]
	}
	return nil
}

// AnalyzeCapacity judges every probed rate of every search in runs and
// brackets each config's capacity. Only ok runs give the metric; a
// saturated run counts as "does not hold" (the engine did not sustain the
// rate); every other verdict (failed, errors, incomplete, client_limited,
// gpu_contended, throttled) says nothing about the SLO and is left out.
func AnalyzeCapacity(spec CapacitySpec, runs []CapacityRun) CapacityReport {
	rep := CapacityReport{Spec: spec}
	for _, sh := range spec.Shapes {
		for _, cfg := range spec.Configs {
			s := CapacitySearch{Config: cfg, Shape: sh, PerBlock: map[int]float64{}, PerBlockCrossing: map[int]Crossing{}}
			byRate := map[float64][]CapacityRun{}
			for _, r := range runs {
				if r.Config == cfg && r.Shape == sh {
					byRate[r.Rate] = append(byRate[r.Rate], r)
				}
			}
			for _, rate := range slices.Sorted(maps.Keys(byRate)) {
				s.Probes = append(s.Probes, judgeProbe(spec, rate, byRate[rate]))
			}
			bracket(&s)
			perBlock(spec, &s)
			rep.Searches = append(rep.Searches, s)
		}
	}
	for _, sh := range spec.Shapes {
		base := rep.Search(spec.Baseline, sh)
		for _, cfg := range spec.Configs {
			if cfg == spec.Baseline || base == nil {
				continue
			}
			c := CapacityComparison{Config: cfg, Baseline: spec.Baseline, Shape: sh,
				Comparison: CompareBrackets(base, rep.Search(cfg, sh), spec.Confidence)}
			if c.N < 2 {
				c.Note = "fewer than two blocks where both capacities were bracketed"
			}
			rep.Comparisons = append(rep.Comparisons, c)
		}
	}
	return rep
}

// judgeProbe decides what the blocks of one rate say, each block by the
// first of its attempts that counts (else its last), each bound by its own
// CI; the probe's verdict combines them (combineVerdicts).
func judgeProbe(spec CapacitySpec, rate float64, runs []CapacityRun) CapacityProbe {
	bounds := spec.Constraints()
	slices.SortFunc(runs, func(a, b CapacityRun) int {
		return cmp.Or(cmp.Compare(a.Block, b.Block), cmp.Compare(a.Attempt, b.Attempt))
	})
	var used []CapacityRun
	attempts := map[int]int{}
	for _, r := range runs {
		attempts[r.Block]++
		switch last := len(used) - 1; {
		case last < 0 || used[last].Block != r.Block:
			used = append(used, r)
		case !used[last].counts(bounds):
			used[last] = r
		}
	}
	p := CapacityProbe{Rate: rate, Blocks: len(used)}
	vals := make([][]float64, len(bounds))
	sat := 0
	for _, r := range used {
		if r.Attempt == 0 || p.Cell == "" {
			p.Cell = r.ID
		}
		c := CapacityCell{Block: r.Block, Status: r.Status, Attempts: attempts[r.Block]}
		switch {
		case r.Status == VerdictOK && r.counts(bounds):
			v, slack := r.value(0, bounds[0]), math.Inf(1)
			c.Value = &v
			for i, b := range bounds {
				x := r.value(i, b)
				vals[i] = append(vals[i], x)
				slack = math.Min(slack, b.slack(x))
			}
			c.Slack = &slack
		case r.Status == VerdictSaturated:
			sat++
		}
		p.Runs = append(p.Runs, c)
	}
	p.N = len(vals[0]) + sat
	pbs := make([]ProbeBound, len(bounds))
	for i, b := range bounds {
		pbs[i] = judgeBound(b, vals[i], sat, spec.Confidence)
	}
	p.Mean, p.CILo, p.CIHi = pbs[0].Mean, pbs[0].CILo, pbs[0].CIHi
	p.Verdict, p.Note = combineVerdicts(pbs)
	if len(bounds) > 1 {
		p.Bounds = pbs
	}
	return p
}

// bracket sets Lo, Hi, the uncertain band and the non-monotone rates from
// the probes' verdicts.
func bracket(s *CapacitySearch) {
	if i := slices.IndexFunc(s.Probes, func(p CapacityProbe) bool { return p.Verdict == ProbeFails }); i >= 0 {
		s.Hi = ptr(s.Probes[i].Rate)
	}
	for _, p := range s.Probes {
		switch {
		case p.Verdict == ProbeHolds && (s.Hi == nil || p.Rate < *s.Hi):
			s.Lo = ptr(p.Rate)
		case p.Verdict == ProbeHolds:
			s.NonMonotone = append(s.NonMonotone, p.Rate)
		}
	}
	for _, p := range s.Probes {
		if p.Verdict.Decided() || (s.Lo != nil && p.Rate < *s.Lo) || (s.Hi != nil && p.Rate > *s.Hi) {
			continue
		}
		r := ptr(p.Rate)
		s.BandLo, s.BandHi = cmp.Or(s.BandLo, r), r
	}
}

// perBlock brackets each block's crossing of the limit, places a point in
// each bracket, and estimates the capacity with its censored CI.
func perBlock(spec CapacitySpec, s *CapacitySearch) {
	type pt struct{ rate, slack float64 } // slack: of the tightest bound; −Inf saturated
	blocks := map[int][]pt{}
	for _, p := range s.Probes {
		for _, r := range p.Runs {
			switch {
			case r.Slack != nil:
				blocks[r.Block] = append(blocks[r.Block], pt{p.Rate, *r.Slack})
			case r.Status == VerdictSaturated:
				blocks[r.Block] = append(blocks[r.Block], pt{p.Rate, math.Inf(-1)})
			}
		}
	}
	for b, pts := range blocks { // pts are by rate: probes are
		fail := slices.IndexFunc(pts, func(q pt) bool { return q.slack < 0 })
		if fail <= 0 { // none outside a bound, or the lowest already is: censored on one side
			continue
		}
		lo, hi := pts[fail-1], pts[fail]
		x := Crossing{Lo: lo.rate, Hi: hi.rate, Point: math.Sqrt(lo.rate * hi.rate), Censored: true}
		if !math.IsInf(hi.slack, -1) { // interpolate the slack to 0 (for one latency bound: the metric to its limit)
			x.Point, x.Censored = lo.rate+lo.slack/(lo.slack-hi.slack)*(hi.rate-lo.rate), false
		}
		s.PerBlock[b], s.PerBlockCrossing[b] = x.Point, x
	}
	if len(s.PerBlockCrossing) < 2 {
		return
	}
	var points, los, his []float64
	for _, b := range slices.Sorted(maps.Keys(s.PerBlockCrossing)) { // a map's order must not change the sums' rounding
		x := s.PerBlockCrossing[b]
		lo, hi := x.bounds()
		points, los, his = append(points, math.Log(x.Point)), append(los, math.Log(lo)), append(his, math.Log(hi))
	}
	lo, hi := CensoredCI(los, his, spec.Confidence)
	e, elo, ehi := math.Exp(stats.Mean(points)), math.Exp(lo), math.Exp(hi)
	s.Estimate, s.EstLo, s.EstHi = &e, &elo, &ehi
}

// CensoredCI is a confidence interval for the mean of values each known
// only to lie in [los[i], his[i]] (interval-censored; los[i] = his[i] for a
// value known exactly): from the mean of the lower ends less t·se to the
// mean of the upper ends plus t·se, t Student's at (1+confidence)/2 with
// n−1 degrees of freedom. The standard error counts both the spread of
// the intervals' midpoints and the spread a value may have inside its
// interval (width²/12, a uniform's variance): blocks that share one
// bracket show no spread of their own, yet their values differ inside it.
// With exact values it is the ordinary t-interval.
func CensoredCI(los, his []float64, confidence float64) (lo, hi float64) {
	ml, mh, se := censoredStats(los, his)
	t := stats.TQuantile((1+confidence)/2, float64(len(los)-1))
	return ml - t*se, mh + t*se
}

// censoredStats are the means of the lower and upper ends and the standard
// error of CensoredCI.
func censoredStats(los, his []float64) (ml, mh, se float64) {
	mids := make([]float64, len(los))
	within := 0.0
	for i := range los {
		mids[i] = (los[i] + his[i]) / 2
		within += (his[i] - los[i]) * (his[i] - los[i]) / 12 / float64(len(los))
	}
	v := within
	if len(mids) > 1 {
		sd := stats.SampleStd(mids)
		v += sd * sd
	}
	return stats.Mean(los), stats.Mean(his), math.Sqrt(v / float64(len(los)))
}

// CompareBrackets compares treat's capacity with base's, paired by the
// blocks both bracketed: per block the log ratio lies in [log(treat.lo /
// base.hi), log(treat.hi / base.lo)] of the two crossings' bounds (a point
// where both were interpolated); its mean gets CensoredCI, the effect is
// the mean log ratio of the blocks' points. P is the two-sided
// p-value of the one-sided t-test on the bound that is farther from 0 on
// the side of the effect (the upper ends when the capacity is lower), so
// that P < 1 − confidence exactly when the CI excludes 0.
func CompareBrackets(base, treat *CapacitySearch, confidence float64) Comparison {
	c := Comparison{Confidence: confidence, P: 1, PAdj: 1, PMW: 1, Method: MethodPairedT}
	var points, los, his []float64
	for _, b := range slices.Sorted(maps.Keys(treat.PerBlockCrossing)) {
		bx, ok := base.PerBlockCrossing[b]
		if !ok {
			continue
		}
		tx := treat.PerBlockCrossing[b]
		blo, bhi := bx.bounds()
		tlo, thi := tx.bounds()
		c.Blocks = append(c.Blocks, b)
		points = append(points, math.Log(tx.Point/bx.Point))
		los, his = append(los, math.Log(tlo/bhi)), append(his, math.Log(thi/blo))
	}
	c.N = len(c.Blocks)
	if c.N < 2 {
		return c
	}
	lo, hi := CensoredCI(los, his, confidence)
	c.MeanLog = stats.Mean(points)
	c.HalfLog = (hi - lo) / 2
	c.Effect, c.Lo, c.Hi = math.Expm1(c.MeanLog), math.Expm1(lo), math.Expm1(hi)
	ml, mh, se := censoredStats(los, his)
	if mh < 0 || ml > 0 { // the bound farther from 0 on the effect's side
		m := ml
		if mh < 0 {
			m = mh
		}
		c.P = 0
		if se > 0 {
			c.P = math.Min(1, stats.TTwoSidedP(m/se, float64(c.N-1)))
		}
	}
	c.PAdj = c.P
	return c
}

// Words is the comparison as the report words it: "sustains 12.0% less
// load [−15.1, −8.7]" where its CI excludes no change, "within noise (±x%)"
// where it does not, "n/a (note)" where there is none.
func (c CapacityComparison) Words() string {
	switch {
	case c.Note != "":
		return "n/a (" + c.Note + ")"
	case c.Significant():
		return CapacityChange(c.Comparison)
	}
	return c.Comparison.String()
}

// CapacityChange is a comparison as "sustains 12.0% less load [−15.1, −8.7]".
func CapacityChange(c Comparison) string {
	if c.N < 2 {
		return c.String()
	}
	word := "more"
	if c.Effect < 0 {
		word = "less"
	}
	return fmt.Sprintf("sustains %.1f%% %s load [%+.1f, %+.1f]", math.Abs(100*c.Effect), word, 100*c.Lo, 100*c.Hi)
}
