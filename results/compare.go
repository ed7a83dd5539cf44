package results

import (
	"fmt"
	"math"
	"sort"
)

// Comparison is a paired comparison of one metric between a treatment and a
// baseline: per block the log ratio log(treat/base), a Student-t CI on its
// mean, converted to a percent change. Effect, Lo and Hi are fractions
// (0.123 means +12.3%).
type Comparison struct {
	N          int     `json:"n"`        // paired blocks used
	Blocks     []int   `json:"blocks"`   // which blocks, ascending
	MeanLog    float64 `json:"mean_log"` // mean per-block log ratio
	HalfLog    float64 `json:"half_log"` // t-CI half-width of MeanLog
	Effect     float64 `json:"effect"`   // exp(MeanLog) − 1
	Lo         float64 `json:"lo"`       // exp(MeanLog − HalfLog) − 1
	Hi         float64 `json:"hi"`       // exp(MeanLog + HalfLog) − 1
	P          float64 `json:"p"`        // two-sided paired t-test of mean log ratio = 0
	PAdj       float64 `json:"p_holm"`   // Holm-adjusted P within its table (= P until adjusted)
	PMW        float64 `json:"p_mwu"`    // Mann–Whitney U p-value (unpaired, unadjusted); secondary
	Confidence float64 `json:"confidence"`
	Saturated  bool    `json:"saturated"` // either side had a saturated run
}

// Compare pairs base and treat by block (block → per-run metric) and compares
// them: the per-block log ratio log(treat/base), its mean with a Student-t
// CI at the given confidence, the two-sided t-test p-value of "mean log ratio
// = 0", and, as a secondary column, the Mann–Whitney U p-value of the two
// unpaired samples. Blocks where either value is missing, not positive or
// not finite are left out. With fewer than two pairs there is no CI: N tells,
// P and PAdj are 1 and the effect fields are 0.
func Compare(base, treat map[int]float64, confidence float64) Comparison {
	c := Comparison{Confidence: confidence, P: 1, PAdj: 1, PMW: 1}
	var logs, bv, tv []float64
	for b, tval := range treat {
		bval, ok := base[b]
		if !ok || !positive(bval) || !positive(tval) {
			continue
		}
		c.Blocks = append(c.Blocks, b)
	}
	sort.Ints(c.Blocks)
	for _, b := range c.Blocks {
		logs = append(logs, math.Log(treat[b]/base[b]))
		bv = append(bv, base[b])
		tv = append(tv, treat[b])
	}
	c.N = len(logs)
	if c.N < 2 {
		return c
	}
	m, half := MeanCI(logs, confidence)
	sd := sampleStd(logs)
	switch {
	case sd > 0:
		c.P = tTwoSidedP(m/(sd/math.Sqrt(float64(c.N))), float64(c.N-1))
	case m != 0:
		c.P = 0 // every block moved by exactly the same ratio
	default:
		c.P = 1
	}
	if math.IsNaN(half) {
		half = 0
	}
	c.MeanLog, c.HalfLog, c.PAdj = m, half, c.P
	c.Effect = math.Expm1(m)
	c.Lo, c.Hi = math.Expm1(m-half), math.Expm1(m+half)
	if p := MannWhitneyP(bv, tv); !math.IsNaN(p) {
		c.PMW = p
	}
	return c
}

// positive reports whether v is a finite number above zero.
func positive(v float64) bool { return v > 0 && !math.IsInf(v, 0) }

// AdjustHolm sets PAdj of every comparison of one table (one family) to its
// Holm-adjusted p-value. Comparisons with fewer than two blocks are not tests
// and do not count towards the family size.
func AdjustHolm(cs []Comparison) {
	ps := make([]float64, len(cs))
	for i, c := range cs {
		ps[i] = math.NaN()
		if c.N >= 2 {
			ps[i] = c.P
		}
	}
	for i, p := range Holm(ps) {
		if !math.IsNaN(p) {
			cs[i].PAdj = p
		}
	}
}

// alpha is the significance level that goes with the CI's confidence.
func (c Comparison) alpha() float64 {
	if c.Confidence > 0 && c.Confidence < 1 {
		return 1 - c.Confidence
	}
	return 0.05
}

// Significant reports whether the comparison shows an effect: at least two
// blocks, a Holm-adjusted p below α = 1 − confidence, and a CI that
// excludes 0.
func (c Comparison) Significant() bool {
	return c.N >= 2 && c.PAdj < c.alpha() && (c.Lo > 0 || c.Hi < 0)
}

// HalfWidthPct is the CI half-width in percent, (Hi − Lo)/2 · 100.
func (c Comparison) HalfWidthPct() float64 { return (c.Hi - c.Lo) / 2 * 100 }

// String formats the comparison for a table: "+12.3% [+8.1, +16.6]" when
// significant, "within noise (±4.2%)" when not (never a bare number),
// "n/a (1 block)" with fewer than two paired blocks; a saturated comparison
// gets the suffix " [saturated]".
func (c Comparison) String() string {
	var s string
	switch {
	case c.N < 2:
		unit := "blocks"
		if c.N == 1 {
			unit = "block"
		}
		s = fmt.Sprintf("n/a (%d %s)", c.N, unit)
	case c.Significant():
		s = fmt.Sprintf("%+.1f%% [%+.1f, %+.1f]", 100*c.Effect, 100*c.Lo, 100*c.Hi)
	default:
		s = fmt.Sprintf("within noise (±%.1f%%)", c.HalfWidthPct())
	}
	if c.Saturated {
		s += " [saturated]"
	}
	return s
}

// groupKey identifies the cells that are compared with each other.
type groupKey struct {
	shape string
	rate  float64
}

// cellOrder sorts cells for tables: shape in matrix order, rate ascending,
// baseline config first, then configs in matrix order.
func cellOrder(s *Sweep, cells []*cellData) []*cellData {
	shapeIdx, cfgIdx := map[string]int{}, map[string]int{s.Baseline: -1}
	for _, c := range cells {
		if _, ok := shapeIdx[c.Info.Shape]; !ok {
			shapeIdx[c.Info.Shape] = len(shapeIdx)
		}
		if _, ok := cfgIdx[c.Info.Config]; !ok {
			cfgIdx[c.Info.Config] = len(cfgIdx)
		}
	}
	out := append([]*cellData(nil), cells...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Info, out[j].Info
		if a.Shape != b.Shape {
			return shapeIdx[a.Shape] < shapeIdx[b.Shape]
		}
		if a.Rate != b.Rate {
			return a.Rate < b.Rate
		}
		return cfgIdx[a.Config] < cfgIdx[b.Config]
	})
	return out
}

// comparisons builds the comparison table (each config against the baseline
// at the same shape and rate) and the A/A noise-floor table (each A/A
// control against its original). Each metric's rows of a table form one Holm
// family.
func comparisons(s *Sweep, cells []*cellData) (main, aa []ComparisonRow) {
	originals := map[groupKey]map[string]*cellData{}
	byID := map[string]*cellData{}
	for _, c := range cells {
		byID[c.Info.ID] = c
		if c.Info.SameAs != "" {
			continue
		}
		k := groupKey{c.Info.Shape, c.Info.Rate}
		if originals[k] == nil {
			originals[k] = map[string]*cellData{}
		}
		originals[k][c.Info.Config] = c
	}
	ordered := cellOrder(s, cells)
	for _, metric := range s.Compare {
		key := ResolveMetric(metric)
		var rows, aaRows []ComparisonRow
		for _, c := range ordered {
			k := groupKey{c.Info.Shape, c.Info.Rate}
			switch {
			case c.Info.SameAs != "":
				orig := byID[c.Info.SameAs]
				if orig == nil {
					orig = originals[k][c.Info.SameAs]
				}
				aaRows = append(aaRows, compareCells(s, metric, key, orig, c))
			case c.Info.Config != s.Baseline:
				rows = append(rows, compareCells(s, metric, key, originals[k][s.Baseline], c))
			}
		}
		main = append(main, holmRows(rows)...)
		aa = append(aa, holmRows(aaRows)...)
	}
	return main, aa
}

// compareCells compares one metric of cell c against base (nil: missing).
func compareCells(s *Sweep, metric, key string, base, c *cellData) ComparisonRow {
	row := ComparisonRow{Metric: metric, Key: key, Config: c.Info.Config, Baseline: s.Baseline,
		Shape: c.Info.Shape, Rate: c.Info.Rate, Cell: c.Info.ID}
	if c.Info.SameAs != "" {
		row.Baseline = c.Info.SameAs
	}
	if base == nil {
		row.Comparison = Comparison{Confidence: s.Confidence, P: 1, PAdj: 1, PMW: 1, Saturated: c.saturated()}
		row.Note = "no " + row.Baseline + " cell at this shape and rate"
		return row
	}
	row.BaseCell = base.Info.ID
	row.Baseline = base.Info.Config
	treat, ref := c.metricByBlock(key), base.metricByBlock(key)
	row.Comparison = Compare(ref, treat, s.Confidence)
	row.Saturated = base.saturated() || c.saturated()
	switch {
	case c.Sum.NRuns == 0:
		row.Note = "cell missing: no usable run"
	case base.Sum.NRuns == 0:
		row.Note = row.Baseline + " cell missing: no usable run"
	case len(treat) == 0 || len(ref) == 0:
		row.Note = "metric " + key + " not in the runs"
	}
	return row
}

// holmRows Holm-adjusts the p-values of one family of rows.
func holmRows(rows []ComparisonRow) []ComparisonRow {
	cs := make([]Comparison, len(rows))
	for i := range rows {
		cs[i] = rows[i].Comparison
	}
	AdjustHolm(cs)
	for i := range rows {
		rows[i].Comparison = cs[i]
	}
	return rows
}
