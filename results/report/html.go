package report

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/stats"
	"gonum.org/v1/plot"
)

// report.html: one self-contained page (no network fetch: inline CSS and
// JS, SVG drawn by the script, a Content-Security-Policy that forbids any
// other source) with the report's tables, rendered here, and interactive
// plots drawn in the browser from the data embedded as JSON.

var (
	//go:embed html/report.tmpl
	htmlTemplate string
	//go:embed html/report.css
	htmlCSS string
	//go:embed html/report.js
	htmlJS string
)

// htmlCSP is the page's Content-Security-Policy: inline script and style
// only, images from data: URLs, nothing else — a fetch would fail.
const htmlCSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"

// htmlCDFPoints is the number of quantiles kept of each cell's step
// durations (0, 1/(n−1), …, 1).
const htmlCDFPoints = 101

// htmlGPUMaxPoints bounds the samples kept per GPU of a run (evenly thinned).
const htmlGPUMaxPoints = 400

// htmlData is what the page's script draws from.
type htmlData struct {
	Simulated  bool     `json:"simulated"`
	Confidence float64  `json:"confidence"`
	Configs    []string `json:"configs"`
	Shapes     []string `json:"shapes"`
	// RateShapes are the shapes measured at two rates or more: those
	// drawn against rate, as in plots/ (writePlots).
	RateShapes []string          `json:"rate_shapes"`
	SameAs     map[string]string `json:"same_as"`  // A/A control → its original
	TTFT       []htmlPoint       `json:"ttft"`     // TTFT p90 against rate (rateMetrics)
	SLO        []htmlLimit       `json:"slo"`      // lines drawn on the TTFT p90 plot
	TPOT       []htmlPoint       `json:"tpot"`     // TPOT p90 against rate
	TPOTSLO    []htmlLimit       `json:"tpot_slo"` // lines drawn on the TPOT p90 plot
	StepCDFs   []htmlCDF         `json:"step_cdfs"`
	GPU        []htmlGPU         `json:"gpu"`
	Capacity   *htmlCapacityData `json:"capacity,omitempty"`
}

// htmlLimit is a horizontal line on a plot: a bound in the metric's unit.
type htmlLimit struct {
	Label string  `json:"label"`
	Value float64 `json:"value"`
}

// htmlCapacityData is what the capacity plot draws: every probe's metric
// with its CI and verdict, and each search's interval.
type htmlCapacityData struct {
	Metric    string              `json:"metric"`
	Limit     float64             `json:"limit"`
	Bound     string              `json:"bound"`  // the first bound in words
	XLabel    string              `json:"xlabel"` // what the search varies
	YLabel    string              `json:"ylabel"` // the first bound's metric, with its unit
	Probes    []htmlCapacityProbe `json:"probes"`
	Intervals []htmlInterval      `json:"intervals"`
}

// htmlCapacityProbe is one probed rate of one search.
type htmlCapacityProbe struct {
	Config  string   `json:"config"`
	Shape   string   `json:"shape"`
	Rate    float64  `json:"rate"`
	Mean    *float64 `json:"mean"`
	Lo      *float64 `json:"lo"`
	Hi      *float64 `json:"hi"`
	Verdict string   `json:"verdict"`
}

// htmlInterval is a search's capacity interval (nil: open at that end).
type htmlInterval struct {
	Config string   `json:"config"`
	Shape  string   `json:"shape"`
	Lo     *float64 `json:"lo"`
	Hi     *float64 `json:"hi"`
}

// htmlCellKey names the cell a datum belongs to.
type htmlCellKey struct {
	Cell   string  `json:"cell"`
	Config string  `json:"config"`
	Shape  string  `json:"shape"`
	Rate   float64 `json:"rate"`
}

// keyOf is the htmlCellKey of c.
func keyOf(c *results.Cell) htmlCellKey {
	return htmlCellKey{Cell: c.Info.ID, Config: c.Info.Config, Shape: c.Info.Shape, Rate: c.Info.Rate}
}

// htmlPoint is one cell's mean and CI of a metric against rate (TTFT or
// TPOT p90); the CI's low end is
// clipped at 0 (a latency is never negative), Clipped says when it was.
type htmlPoint struct {
	htmlCellKey
	Mean      float64  `json:"mean"`
	Lo        *float64 `json:"lo"`
	Hi        *float64 `json:"hi"`
	Clipped   bool     `json:"clipped"`
	N         int      `json:"n"`
	Saturated bool     `json:"saturated"`
	// Unused: the cell has no usable run; the point is the mean of its
	// saturated runs (not a result: drawn apart from the line).
	Unused bool `json:"unused,omitempty"`
}

// htmlCDF is one cell's step-duration distribution as quantiles (µs).
type htmlCDF struct {
	htmlCellKey
	Steps int       `json:"steps"`
	Q     []float64 `json:"q"`
}

// htmlGPU is one run's GPU samples; Series is empty when it has none.
type htmlGPU struct {
	htmlCellKey
	Block  int             `json:"block"`
	Series []htmlGPUSeries `json:"series"`
}

// htmlGPUSeries is one GPU's samples: seconds since the run's first sample
// and, per quantity, its values.
type htmlGPUSeries struct {
	Name string               `json:"name"`
	T    []float64            `json:"t"`
	Y    map[string][]float64 `json:"y"`
}

// htmlMetric is a column of the page's cell table.
type htmlMetric struct {
	Key, Label string
	Scale      float64 // shown value = Scale × stored value
	Unit       string
}

// htmlCellMetrics are the cell table's metric columns; a column no cell has
// is left out.
var htmlCellMetrics = []htmlMetric{
	htmlCol(ttftP90, "TTFT p90"), htmlCol(results.TPOT.Key(results.StatP90), "TPOT p90"), htmlCol(results.E2EL.Key(results.StatP90), "E2EL p90"),
	htmlCol(results.RequestThroughput.Key, "throughput"), htmlCol(results.Goodput.Key, "goodput"),
	htmlCol(results.SLOAttainment.Key, "SLO attainment"), htmlCol(stepP50, "step p50"),
}

// htmlRunMetrics are the run table's metric columns.
var htmlRunMetrics = []htmlMetric{htmlCol(ttftP90, "TTFT p90"), htmlCol(results.RequestThroughput.Key, "throughput"),
	htmlCol(results.Goodput.Key, "goodput"), htmlCol(results.SLOAttainment.Key, "SLO attainment")}

// htmlCol is the column of metric key, shown in its registry unit (a
// share as a percentage).
func htmlCol(key, label string) htmlMetric {
	m, _ := results.MetricOf(key)
	switch m.Unit {
	case results.UnitShare:
		return htmlMetric{key, label, 100, "%"}
	case results.UnitUs:
		return htmlMetric{key, label, 1, " µs"}
	case results.UnitNone:
		return htmlMetric{key, label, 1, ""}
	}
	return htmlMetric{key, label, 1, " " + string(m.Unit)}
}

// htmlValue is one number of a table: its exact value (for machines, in a
// data attribute) and its text.
type htmlValue struct {
	Metric string
	Value  string // strconv 'g' -1: parses back to the stored float64
	Text   string
}

// htmlCellRow is one row of the cell table.
type htmlCellRow struct {
	ID, Config, Shape, Rate, SLO string
	N                            int
	Values                       []htmlValue
}

// htmlRunRow is one row of the run table.
type htmlRunRow struct {
	Cell, Config, Rate, Verdict, Reason, Dir string
	Block                                    int
	Values                                   []htmlValue
	Timeline                                 string // timelineLink: the run is not a result
}

// htmlPage is the template's input.
type htmlPage struct {
	Title, Banner, CSP      string
	Overrides               []string
	CSS                     template.CSS
	JS                      template.JS
	Data                    template.JS
	Head                    htmlHead
	Capacity                *htmlCapacity
	CellMetrics, RunMetrics []htmlMetric
	Cells                   []htmlCellRow
	Runs                    []htmlRunRow
	Comparisons, NoiseFloor []htmlComparison
	Problems                []problemLine // Text as plain text
	Errors                  htmlErrors
	GPUNote                 string         // the runs without GPU samples, in one line
	Figures                 []htmlFigure   // plots of plots/ drawn inline: the forest plot, the per-request CDFs
	HasSLO                  bool           // some cell's runs had an SLO (the cell table's SLO column)
	HasTimelines            bool           // some run that is not a result links its timeline
	Tables                  []sectionTable // the request-class and per-instance tables, as in report.md
}

// htmlFigure is a plot of plots/ in the page, as a data: URL.
type htmlFigure struct {
	ID, Caption string
	Src         template.URL
}

// renderHTML writes report.html.
func renderHTML(ctx context.Context, a *results.Analysis, rd renderer) ([]byte, error) {
	v := newReportView(a)
	s, ordered := v.s, v.ordered
	pg := htmlPage{Title: "mbench report: " + cmp.Or(s.Name, "sweep"), CSP: htmlCSP,
		Overrides: s.Overrides, CSS: template.CSS(htmlCSS), JS: template.JS(htmlJS),
		Head: newHTMLHead(v), Capacity: newHTMLCapacity(v), Errors: newHTMLErrors(ordered), Tables: classInstanceTables(v)}
	for _, r := range v.shown {
		pg.Comparisons = append(pg.Comparisons, htmlComparisonOf(r))
	}
	pg.Figures = htmlFigures(ctx, a, rd)
	for _, r := range a.NoiseFloor {
		pg.NoiseFloor = append(pg.NoiseFloor, htmlComparisonOf(r))
	}
	for _, l := range problemLines(v) {
		pg.Problems = append(pg.Problems, problemLine{Text: plainText(l.Text), Timeline: l.Timeline})
		pg.HasTimelines = pg.HasTimelines || l.Timeline != ""
	}
	if s.Simulated {
		pg.Banner = "SIMULATED ENGINE — numbers model an engine, not vLLM"
	}
	pg.CellMetrics, pg.RunMetrics = metricsPresent(ordered, htmlCellMetrics), metricsPresent(ordered, htmlRunMetrics)
	data := htmlData{Simulated: s.Simulated, Confidence: s.Confidence, Configs: configsOf(ordered, s), StepCDFs: []htmlCDF{}, GPU: []htmlGPU{},
		TTFT: []htmlPoint{}, TPOT: []htmlPoint{}, SameAs: map[string]string{}, Capacity: capacityData(v),
		SLO: latencyLimits(v, rateMetrics[0].key), TPOTSLO: latencyLimits(v, rateMetrics[1].key)}
	data.Shapes, _ = shapesOf(ordered)
	data.RateShapes = []string{}
	for _, sh := range data.Shapes {
		if len(ratesOf(ordered, sh)) >= 2 {
			data.RateShapes = append(data.RateShapes, sh)
		}
	}
	var bare []string
	for i, c := range ordered {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("export: %w", err)
		}
		row := htmlCellRow{ID: c.Info.ID, Config: c.Info.Config, Shape: c.Info.Shape, Rate: fmtFloat(c.Info.Rate), N: c.Sum.NRuns}
		if slos := cellSLOs(c); len(slos) > 0 {
			row.SLO, pg.HasSLO = strings.Join(slos, "; "), true
		}
		for _, m := range pg.CellMetrics {
			row.Values = append(row.Values, cellValue(c.Sum.Metrics[m.Key], m))
		}
		pg.Cells = append(pg.Cells, row)
		if c.Info.SameAs != "" {
			data.SameAs[c.Info.Config] = c.Info.SameAs
		}
		if pt, ok := ratePoint(c, rateMetrics[0].key); ok {
			data.TTFT = append(data.TTFT, pt)
		}
		if pt, ok := ratePoint(c, rateMetrics[1].key); ok {
			data.TPOT = append(data.TPOT, pt)
		}
		if cdf, ok := cellStepCDF(rd, c, i); ok {
			data.StepCDFs = append(data.StepCDFs, cdf)
		}
		bare = pg.addRuns(rd, c, &data, bare)
	}
	pg.GPUNote = gpuNote(bare, len(data.GPU))
	js, err := json.Marshal(data) // escapes <, > and &: safe inside <script>
	if err != nil {
		return nil, fmt.Errorf("export: report.html data: %w", err)
	}
	pg.Data = template.JS(js)
	t, err := template.New("report.html").Parse(htmlTemplate)
	if err != nil {
		return nil, fmt.Errorf("export: report.html template: %w", err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, pg); err != nil {
		return nil, fmt.Errorf("export: report.html: %w", err)
	}
	return []byte(rd.redact(buf.String())), nil
}

// htmlFigures are the page's plots, drawn as in plots/ and inline as
// data: images: the page fetches nothing.
func htmlFigures(ctx context.Context, a *results.Analysis, rd renderer) []htmlFigure {
	var figs []htmlFigure
	figure := func(id, caption string, p *plot.Plot) {
		if p == nil {
			return
		}
		png, err := plotBytes(p, "png")
		if err != nil {
			rd.warn("report.html: plot %s not drawn: %v", id, err)
			return
		}
		figs = append(figs, htmlFigure{ID: id, Caption: caption,
			Src: template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(png))})
	}
	figure("forest", "Every comparison on the primary metric: the change with its CI, A/A controls beside in grey; a line at no change (plots/comparisons_forest.svg).", forestPlot(rd, a))
	figure("request-ttft-cdf", "Each measured request's TTFT per config, from the runs that are results (plots/request_ttft_cdf.svg).", requestCDFPlot(ctx, rd, &a.Sweep, a.Ordered, results.TTFT))
	figure("request-tpot-cdf", "Each measured request's TPOT per config, from the runs that are results (plots/request_tpot_cdf.svg).", requestCDFPlot(ctx, rd, &a.Sweep, a.Ordered, results.TPOT))
	return figs
}

// metricsPresent are the metrics of ms that some cell of ordered has.
func metricsPresent(ordered []*results.Cell, ms []htmlMetric) []htmlMetric {
	return slices.DeleteFunc(slices.Clone(ms), func(m htmlMetric) bool { return !results.AnyCellHas(ordered, m.Key) })
}

// addRuns adds the rows of cell c's runs and their GPU plots; it returns
// bare with the runs that have no GPU samples appended.
func (pg *htmlPage) addRuns(rd renderer, c *results.Cell, data *htmlData, bare []string) []string {
	for _, r := range c.Runs {
		rr := htmlRunRow{Cell: c.Info.ID, Config: c.Info.Config, Rate: fmtFloat(c.Info.Rate), Block: r.Ref.Block,
			Verdict: string(r.Ref.Status), Reason: cmp.Or(r.Ref.Reason, r.Problem), Dir: r.Ref.Dir, Timeline: timelineLink(c, r)}
		for _, m := range pg.RunMetrics {
			hv := htmlValue{Metric: m.Key, Text: "—"}
			if x, ok := r.Metrics[m.Key]; ok {
				hv.Value, hv.Text = strconv.FormatFloat(x, 'g', -1, 64), fmtNum(m.Scale*x)+m.Unit
			}
			rr.Values = append(rr.Values, hv)
		}
		pg.Runs = append(pg.Runs, rr)
		if r.Sum != nil && filepath.IsLocal(r.Ref.Dir) {
			if g := runGPU(rd, c, r); len(g.Series) > 0 {
				data.GPU = append(data.GPU, g)
			} else {
				bare = append(bare, fmt.Sprintf("%s b%d", c.Info.ID, r.Ref.Block))
			}
		}
	}
	return bare
}

// gpuNote names the runs without GPU samples (bare), where nGPU runs had
// some.
func gpuNote(bare []string, nGPU int) string {
	switch {
	case len(bare) > 0 && nGPU == 0:
		return fmt.Sprintf("No run has GPU samples (gpu.jsonl missing or empty in all %d runs): no GPU plots.", len(bare))
	case len(bare) > 0:
		return fmt.Sprintf("No GPU samples in %d runs: %s.", len(bare), strings.Join(bare, ", "))
	}
	return ""
}

// ratePoint is cell c's metric key (a latency) on a plot against rate: its
// mean and CI over the usable runs, or else saturatedPoint.
func ratePoint(c *results.Cell, key string) (htmlPoint, bool) {
	m, ok := c.Sum.Metrics[key]
	if !ok || m.Mean == nil {
		return saturatedPoint(c, key)
	}
	pt := htmlPoint{htmlCellKey: keyOf(c), Mean: *m.Mean, Lo: m.CILo, Hi: m.CIHi, N: m.N, Saturated: c.Saturated()}
	if pt.Lo != nil && *pt.Lo < 0 {
		pt.Lo, pt.Clipped = new(0.0), true
	}
	return pt, true
}

// saturatedPoint is metric key of a cell without a usable run whose runs
// saturated: the mean of those runs' values, marked as not a result, so that
// the plot shows where the engine stopped keeping up instead of dropping
// the cell.
func saturatedPoint(c *results.Cell, key string) (htmlPoint, bool) {
	var xs []float64
	for _, r := range c.Runs {
		if v, ok := r.Metrics[key]; ok && r.Ref.Status == results.VerdictSaturated && r.Sum != nil {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return htmlPoint{}, false
	}
	m := 0.0
	for _, x := range xs {
		m += x / float64(len(xs))
	}
	return htmlPoint{htmlCellKey: keyOf(c), Mean: m, N: len(xs), Saturated: true, Unused: true}, true
}

// latencyLimits are the lines the plot of key (p90_ttft_ms or p90_tpot_ms)
// against rate draws: every bound the runs' SLOs set on that latency, and a
// capacity search's limit when its metric is key.
func latencyLimits(v *reportView, key string) []htmlLimit {
	out := []htmlLimit{}
	seen := map[float64]bool{}
	add := func(label string, ms float64) {
		if ms > 0 && !seen[ms] {
			seen[ms] = true
			out = append(out, htmlLimit{Label: label, Value: ms})
		}
	}
	if c := v.capacity; c != nil {
		for _, b := range c.Spec.Constraints() {
			if b.MaxMs != nil && results.Lookup(b.Metric).Key == key {
				add("capacity limit: "+b.String(), *b.MaxMs)
			}
		}
	}
	for _, c := range v.ordered {
		for _, r := range c.Used {
			if r.Sum == nil || r.Sum.SLO == nil {
				continue
			}
			switch key {
			case ttftP90:
				add(fmt.Sprintf("SLO: TTFT ≤ %g ms", r.Sum.SLO.TTFTMs), r.Sum.SLO.TTFTMs)
			case results.TPOT.Key(results.StatP90):
				add(fmt.Sprintf("SLO: TPOT ≤ %g ms", r.Sum.SLO.TPOTMs), r.Sum.SLO.TPOTMs)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// capacityData is what the capacity plot draws, nil without a search.
func capacityData(v *reportView) *htmlCapacityData {
	rep := v.capacity
	if rep == nil {
		return nil
	}
	first := rep.Spec.Constraints()[0] // the plot shows the first bound's metric
	d := &htmlCapacityData{Metric: first.Metric, Limit: first.Limit(), Bound: first.String(), XLabel: "offered rate (req/s)", YLabel: first.Metric + ", mean ± CI",
		Probes: []htmlCapacityProbe{}, Intervals: []htmlInterval{}}
	if rep.Spec.Over == "concurrency" {
		d.XLabel = "requests in flight"
	}
	if first.MaxMs != nil {
		d.YLabel = first.Metric + " (ms), mean ± CI"
	}
	for _, sr := range rep.Searches {
		d.Intervals = append(d.Intervals, htmlInterval{Config: sr.Config, Shape: sr.Shape, Lo: sr.Lo, Hi: sr.Hi})
		for _, p := range sr.Probes {
			hp := htmlCapacityProbe{Config: sr.Config, Shape: sr.Shape, Rate: p.Rate, Mean: p.Mean, Lo: p.CILo, Hi: p.CIHi, Verdict: string(p.Verdict)}
			if hp.Lo != nil && *hp.Lo < 0 {
				hp.Lo = new(0.0)
			}
			d.Probes = append(d.Probes, hp)
		}
	}
	return d
}

// cellValue formats a cell metric: "mean ±half" (or "(n=1)"), "—" without data.
func cellValue(m results.MetricStats, hm htmlMetric) htmlValue {
	v := htmlValue{Metric: hm.Key, Text: meanCI(m, hm.Scale, hm.Unit)}
	if d, _ := results.MetricOf(hm.Key); d.Unit == results.UnitShare {
		v.Text = proportionCI(m)
	}
	if m.Mean != nil {
		v.Value = strconv.FormatFloat(*m.Mean, 'g', -1, 64)
	}
	return v
}

// cellStepCDF is the step-duration quantiles of a cell's used runs (a
// reservoir sample of their step logs), when it has any.
func cellStepCDF(rd renderer, c *results.Cell, i int) (htmlCDF, bool) {
	res := reservoir{rng: rand.New(rand.NewPCG(uint64(i)+1, 0x5eed))}
	for _, r := range c.Runs {
		if r.Sum == nil || r.Problem != "" || !filepath.IsLocal(r.Ref.Dir) {
			continue
		}
		if err := rd.logs.StepDurations(r.Ref.Dir, res.add); err != nil {
			rd.warn("report.html step CDF: %v", err)
		}
	}
	if len(res.xs) == 0 {
		return htmlCDF{}, false
	}
	sort.Float64s(res.xs)
	cdf := htmlCDF{htmlCellKey: keyOf(c), Steps: res.seen}
	for k := 0; k < htmlCDFPoints; k++ {
		cdf.Q = append(cdf.Q, stats.PercentileSorted(res.xs, 100*float64(k)/(htmlCDFPoints-1)))
	}
	return cdf, true
}

// runGPU is a run's GPU samples, thinned to htmlGPUMaxPoints per GPU.
func runGPU(rd renderer, c *results.Cell, r *results.Run) htmlGPU {
	g := htmlGPU{htmlCellKey: keyOf(c), Block: r.Ref.Block, Series: []htmlGPUSeries{}}
	series, first := gpuSamples(rd, r, "report.html GPU series")
	for _, k := range probes.SortedGPUKeys(series) {
		xs := series[k]
		step := max(1, (len(xs)+htmlGPUMaxPoints-1)/htmlGPUMaxPoints)
		gs := htmlGPUSeries{Name: fmt.Sprintf("%s gpu%d", k.Host, k.GPU), Y: map[string][]float64{}}
		for j := 0; j < len(xs); j += step {
			v := xs[j]
			gs.T = append(gs.T, float64(v.TsUs-first)/1e6)
			gs.Y["util_gpu"] = append(gs.Y["util_gpu"], v.UtilGPU)
			gs.Y["mem_used_mib"] = append(gs.Y["mem_used_mib"], v.MemUsedMiB)
			gs.Y["power_w"] = append(gs.Y["power_w"], v.PowerW)
			gs.Y["sm_clock_mhz"] = append(gs.Y["sm_clock_mhz"], v.SMClockMHz)
		}
		g.Series = append(g.Series, gs)
	}
	return g
}
