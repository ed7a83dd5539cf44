package results

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/mbench/mbench/stats"
	"gonum.org/v1/gonum/stat/distuv"
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
	// Method says where the CI's spread came from: MethodSecondStage (a
	// sweep the stopping rule ended: the paired blocks after the first
	// stage), MethodPairedT (every block) or MethodTwoStage (the stopping
	// rule's projection); Stage1 is the number of first-stage pairs and
	// SpreadBlocks the number of blocks the spread came from.
	Method       Method `json:"method"`
	Stage1       int    `json:"stage1_blocks,omitempty"`
	SpreadBlocks int    `json:"spread_blocks,omitempty"`
	// PositionAdjusted: a significant position-in-block effect was taken
	// out of every block's log ratio (see Nuisance).
	PositionAdjusted bool `json:"position_adjusted"`
	// Primary: the comparison is on the declared primary metric (one Holm
	// family across the whole table); others are secondary.
	Primary bool `json:"primary"`
}

// Compare pairs base and treat by block (block → per-run metric) and compares
// them: the per-block log ratio log(treat/base), its mean with a Student-t
// CI at the given confidence, the two-sided t-test p-value of "mean log ratio
// = 0", and, as a secondary column, the Mann–Whitney U p-value of the two
// unpaired samples. Blocks where either value is missing, not positive or
// not finite are left out. With fewer than two pairs there is no CI: N tells,
// P and PAdj are 1 and the effect fields are 0.
func Compare(base, treat map[int]float64, confidence float64) Comparison {
	return CompareAdjusted(base, treat, nil, Nuisance{}, Spread{}, confidence)
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
	for i, p := range stats.Holm(ps) {
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

// DetectablePct is the smallest change, in percent, that the comparison
// would have found 4 times in 5 (its minimum detectable effect at 80%
// power): a true change of this size lands outside the CI's reach of 0
// with probability 0.8. It is the half-width scaled by (z₁₋α/₂ + z₀.₈) /
// z₁₋α/₂ in log space (2.80/1.96 = 1.43× at 95%), the normal
// approximation of the t test's power; 0 with fewer than two blocks.
func (c Comparison) DetectablePct() float64 {
	if c.N < 2 {
		return 0
	}
	z := distuv.UnitNormal.Quantile(1 - c.alpha()/2)
	return (math.Exp(c.HalfLog*(z+distuv.UnitNormal.Quantile(0.8))/z) - 1) * 100
}

// String formats the comparison for a table: "+12.3% [+8.1, +16.6]" when
// significant, "within noise (±4.2%; could detect ±6.0%)" when not (never
// a bare number; beside the half-width, the change it could have found:
// DetectablePct),
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
		s = "within noise (±" + Pct(c.HalfWidthPct()) + "; could detect ±" + Pct(c.DetectablePct()) + ")"
	}
	if c.Saturated {
		s += " [saturated]"
	}
	return s
}

// Pct is a percentage as a comparison's words give it: one decimal, or three
// significant digits from 1000% (a CI over a few wild blocks: its size, not
// digits of it).
func Pct(x float64) string {
	if x >= 1000 {
		return fmt.Sprintf("%.3g%%", x)
	}
	return fmt.Sprintf("%.1f%%", x)
}

// ComparisonRow is one comparison of a table: Config's cell against the
// baseline's cell at the same shape and rate, for one metric.
type ComparisonRow struct {
	Metric   string  `json:"metric"` // as the user named it (ttft_p90)
	Key      string  `json:"key"`    // RunMetrics key (p90_ttft_ms)
	Config   string  `json:"config"`
	Baseline string  `json:"baseline"`
	Shape    string  `json:"shape"`
	Rate     float64 `json:"rate"`
	Cell     string  `json:"cell"`
	BaseCell string  `json:"base_cell"`      // "" when the baseline cell is missing
	Note     string  `json:"note,omitempty"` // why no comparison was possible, when a side has no data
	Comparison
}

// Text is the formatted comparison, or "n/a (why)" when a side has no data.
func (r ComparisonRow) Text() string {
	if r.Note != "" {
		return "n/a (" + r.Note + ")"
	}
	return r.Comparison.String()
}

// groupKey identifies the cells that are compared with each other.
type groupKey struct {
	shape string
	rate  float64
}

// cellOrder sorts cells for tables: shape in matrix order, rate ascending,
// baseline config first, then configs in matrix order.
func cellOrder(s *Sweep, cells []*Cell) []*Cell {
	shapeIdx, cfgIdx := map[string]int{}, map[string]int{s.Baseline: -1}
	for _, c := range cells {
		if _, ok := shapeIdx[c.Info.Shape]; !ok {
			shapeIdx[c.Info.Shape] = len(shapeIdx)
		}
		if _, ok := cfgIdx[c.Info.Config]; !ok {
			cfgIdx[c.Info.Config] = len(cfgIdx)
		}
	}
	out := slices.Clone(cells)
	slices.SortStableFunc(out, func(x, y *Cell) int {
		a, b := x.Info, y.Info
		return cmp.Or(cmp.Compare(shapeIdx[a.Shape], shapeIdx[b.Shape]), cmp.Compare(a.Rate, b.Rate), cmp.Compare(cfgIdx[a.Config], cfgIdx[b.Config]))
	})
	return out
}

// comparisons builds the comparison table (each config against the baseline
// at the same shape and rate) and the A/A noise-floor table (each A/A
// control against its original), and fits the position effect of every
// compared metric. The primary metric's rows of both tables are one Holm
// family; each secondary metric's rows of a table form their own family.
// Every comparison is CompareAdjusted's with the spread spreadFor picks. Only runs whose status is "ok" count.
func comparisons(s *Sweep, cells []*Cell) (main, aa []ComparisonRow, nuis []Nuisance) {
	originals := map[groupKey]map[string]*Cell{}
	byID := map[string]*Cell{}
	for _, c := range cells {
		byID[c.Info.ID] = c
		if c.Info.SameAs != "" {
			continue
		}
		k := groupKey{c.Info.Shape, c.Info.Rate}
		if originals[k] == nil {
			originals[k] = map[string]*Cell{}
		}
		originals[k][c.Info.Config] = c
	}
	ordered := cellOrder(s, cells)
	for i, m := range s.ComparedMetrics() {
		metric, key, primary := m.Name, m.Key, i == 0
		nu := EstimatePosition(positionObs(cells, key), s.Confidence)
		nu.Metric = metric
		nuis = append(nuis, nu)
		var rows, aaRows []ComparisonRow
		for _, c := range ordered {
			k := groupKey{c.Info.Shape, c.Info.Rate}
			switch {
			case c.Info.SameAs != "":
				orig := cmp.Or(byID[c.Info.SameAs], originals[k][c.Info.SameAs])
				aaRows = append(aaRows, compareCells(s, metric, key, orig, c, nu))
			case c.Info.Config != s.Baseline:
				rows = append(rows, compareCells(s, metric, key, originals[k][s.Baseline], c, nu))
			}
		}
		if primary {
			all := holmRows(append(append([]ComparisonRow(nil), rows...), aaRows...))
			for i := range all {
				all[i].Primary = true
			}
			rows, aaRows = all[:len(rows)], all[len(rows):]
		} else {
			rows, aaRows = holmRows(rows), holmRows(aaRows)
		}
		main = append(main, rows...)
		aa = append(aa, aaRows...)
	}
	return main, aa, nuis
}

// ComparedMetrics are the metrics compared with the baseline, resolved
// (Lookup): the primary metric first, then the other compared metrics in
// their order, each once.
func (s *Sweep) ComparedMetrics() []Named {
	out := []Named{s.Primary()}
	for _, name := range s.Compare {
		if m := Lookup(name); m.Key != out[0].Key {
			out = append(out, m)
		}
	}
	return out
}

// Primary is the sweep's primary metric, resolved (Lookup);
// DefaultStopMetric when the sweep names none.
func (s *Sweep) Primary() Named {
	if s.Metric == "" {
		return Lookup(DefaultStopMetric)
	}
	return Lookup(s.Metric)
}

// positionObs lists every usable run of every cell with its position, for
// the nuisance fit of metric key.
func positionObs(cells []*Cell, key string) []Obs {
	var obs []Obs
	for _, c := range cells {
		for b, r := range c.usable() {
			if v, ok := r.Metrics[key]; ok && r.Ref.Position > 0 {
				obs = append(obs, Obs{Cell: c.Info.ID, Block: b, Position: r.Ref.Position - 1, Value: v})
			}
		}
	}
	return obs
}

// compareCells compares one metric of cell c against base (nil: missing).
func compareCells(s *Sweep, metric, key string, base, c *Cell, nu Nuisance) ComparisonRow {
	row := ComparisonRow{Metric: metric, Key: key, Config: c.Info.Config, Baseline: s.Baseline,
		Shape: c.Info.Shape, Rate: c.Info.Rate, Cell: c.Info.ID}
	if c.Info.SameAs != "" {
		row.Baseline = c.Info.SameAs
	}
	if base == nil {
		row.Comparison = Comparison{Confidence: s.Confidence, P: 1, PAdj: 1, PMW: 1, Saturated: c.Saturated()}
		row.Note = "no " + row.Baseline + " cell at this shape and rate"
		return row
	}
	row.BaseCell = base.Info.ID
	row.Baseline = base.Info.Config
	tu, bu := c.usable(), base.usable()
	treat, ref := byBlock(tu, key), byBlock(bu, key)
	dpos := map[int]float64{}
	for b, r := range tu {
		if q := bu[b]; q != nil {
			dpos[b] = float64(r.Ref.Position - q.Ref.Position)
		}
	}
	row.Comparison = CompareAdjusted(ref, treat, dpos, nu, spreadFor(s, lastTogether(c, base)), s.Confidence)
	row.Saturated = base.Saturated() || c.Saturated()
	switch {
	case len(tu) == 0:
		row.Note = "cell missing: no run with verdict ok"
	case len(bu) == 0:
		row.Note = row.Baseline + " cell missing: no run with verdict ok"
	case len(treat) == 0 || len(ref) == 0:
		row.Note = "metric " + key + " not in the runs"
	}
	return row
}

// lastTogether is the last block in which both cells ran, whatever the
// runs' verdicts (0: none).
func lastTogether(c, base *Cell) int {
	in := map[int]bool{}
	for _, r := range c.Runs {
		in[r.Ref.Block] = true
	}
	last := 0
	for _, r := range base.Runs {
		if in[r.Ref.Block] {
			last = max(last, r.Ref.Block)
		}
	}
	return last
}

// spreadFor picks the blocks a comparison's CI takes its spread from. A
// comparison the stopping rule ended — the whole sweep, or this pair of
// cells, which an only_unconverged sweep stops running once within target
// — takes it from the second stage (the paired blocks after the first
// Stage1), as the rule judged it; any other comparison from every block.
// last is the last block in which both cells ran: a pair stopped early has
// no runs after its stop, while a run graded out (client_limited,
// saturated) in the sweep's last block is still a run, and its pair was
// not stopped — taking that for an early stop printed a CI the rule never
// judged.
func spreadFor(s *Sweep, last int) Spread {
	if s.Stage1 <= 0 {
		return Spread{}
	}
	if s.RuleStop || last > s.Stage1 && last < s.lastBlock() {
		return Spread{MethodSecondStage, s.Stage1}
	}
	return Spread{}
}

// usable is block → the run used for it, restricted to runs whose status is
// "ok": the only runs that are results.
func (c *Cell) usable() map[int]*Run {
	out := map[int]*Run{}
	for b, r := range c.Used {
		if r.Ref.Status.Usable() {
			out[b] = r
		}
	}
	return out
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
