package report

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/stats"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// stepSampleCap bounds the step durations kept per config for the CDF
// (reservoir sample), so memory does not grow with the step log.
const stepSampleCap = 20000

// plotW, plotH are the size of every plot.
var plotW, plotH = 20 * vg.Centimeter, 12 * vg.Centimeter

// writePlots writes plots/ as PNG and SVG: every primary comparison's change
// with its CI (comparisons_forest), TTFT p90 and TPOT p90 against rate per
// shape with two rates or more, a timeline of every run that is not a result, the CDFs
// of each request's TTFT and TPOT per config,
// the step-duration CDF per config, and GPU utilisation over time per run.
// A plot that cannot be drawn is a warning; a file that cannot be written is
// an error.
func writePlots(ctx context.Context, a *results.Analysis, rd renderer, save func(name string, data []byte) error) error {
	s, ordered := &a.Sweep, a.Ordered
	shapes, _ := shapesOf(ordered)
	if err := savePlot(rd, save, forestPlot(rd, a), "comparisons_forest"); err != nil {
		return err
	}
	for _, sh := range shapes {
		if len(ratesOf(ordered, sh)) < 2 {
			continue // one rate is a point, not a curve: the forest plot shows its comparisons
		}
		for _, m := range rateMetrics {
			p := ratePlot(rd, s, ordered, sh, m)
			if err := savePlot(rd, save, p, m.file+"_vs_rate_"+fileSafe(sh)); err != nil {
				return err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	for _, l := range []results.Latency{results.TTFT, results.TPOT} {
		if err := savePlot(rd, save, requestCDFPlot(ctx, rd, s, ordered, l), "request_"+l.Name+"_cdf"); err != nil {
			return err
		}
	}
	if err := savePlot(rd, save, stepCDFPlot(ctx, rd, s, ordered), "step_duration_cdf"); err != nil {
		return err
	}
	for _, c := range ordered {
		for _, r := range c.Runs {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("export: %w", err)
			}
			if !filepath.IsLocal(r.Ref.Dir) {
				continue
			}
			if name, ok := timelineOf(c, r); ok { // not a result: see why over its time
				if err := saveStacked(rd, save, timelinePlots(rd, s, c, r), name); err != nil {
					return err
				}
			}
			if err := savePlot(rd, save, gpuPlot(rd, s, c, r), fmt.Sprintf("gpu_util_%s_b%d", c.Info.ID, r.Ref.Block)); err != nil {
				return err
			}
		}
	}
	return nil
}

// savePlot renders p as PNG and SVG and saves each as base.png, base.svg;
// a nil p (nothing to draw) saves nothing. gonum/plot panics on some
// degenerate input; that becomes a warning, not a crash.
func savePlot(rd renderer, save func(name string, data []byte) error, p *plot.Plot, base string) error {
	if p == nil {
		return nil
	}
	for _, format := range []string{"png", "svg"} {
		b, err := plotBytes(p, format)
		if err != nil {
			rd.warn("plot %s.%s not drawn: %v", base, format, err)
			continue
		}
		if err := save(base+"."+format, b); err != nil {
			return err
		}
	}
	return nil
}

// plotBytes renders p in format (png, svg); a panic of gonum/plot on
// degenerate input is an error.
func plotBytes(p *plot.Plot, format string) (_ []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("drawing failed: %v", r)
		}
	}()
	wt, err := p.WriterTo(plotW, plotH, format)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fileSafe replaces every character that is not safe in a file name.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}

// newPlot returns a plot with a title, axis labels and a white background.
func newPlot(rd renderer, s *results.Sweep, title, x, y string) *plot.Plot {
	p := plot.New()
	if s.Simulated {
		title += " — SIMULATED ENGINE"
	}
	p.Title.Text = rd.redact(title)
	p.X.Label.Text, p.Y.Label.Text = x, y
	p.Add(plotter.NewGrid())
	return p
}

// errPoints are points with asymmetric Y errors.
type errPoints struct {
	plotter.XYs
	lo, hi []float64
}

// YError implements plotter.YErrorer.
func (e errPoints) YError(i int) (float64, float64) { return e.lo[i], e.hi[i] }

// rateMetric is a latency drawn against the offered rate.
type rateMetric struct {
	key   string // the cell metric (results' name)
	label string // as the plot names it
	file  string // the plot's base name: <file>_vs_rate_<shape>
}

// rateMetrics are the metrics drawn against rate, per config with CIs,
// where a shape has two rates or more: what queueing does to the first
// token and to each token after it.
var rateMetrics = []rateMetric{
	{key: ttftP90, label: "TTFT p90", file: "ttft_p90"},
	{key: results.TPOT.Key(results.StatP90), label: "TPOT p90", file: "tpot_p90"},
}

// ratePlot draws metric m against rate, one line per config, with CI error
// bars; saturated cells get a cross. The Y axis is logarithmic when the
// values span more than 5×.
func ratePlot(rd renderer, s *results.Sweep, ordered []*results.Cell, shape string, m rateMetric) *plot.Plot {
	p := newPlot(rd, s, m.label+" vs rate ("+shape+")", "offered rate (req/s)", m.label+" (ms), mean ± CI")
	all := rateSeries(s, ordered, shape, m.key)
	if len(all) == 0 {
		p.Title.Text += " (no data)"
		p.Legend.Top, p.Legend.Left = true, true
		return p
	}
	minY, maxY, clipped := clipCIs(all)
	if clipped {
		p.Title.Text += " (CI bars clipped)"
	}
	logY := maxY/math.Max(minY, 1e-9) > 5
	// Headroom above the data for the legend, margins at the sides.
	if logY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, logTicks{}
		p.Y.Label.Text += " (log scale)"
		p.Y.Min, p.Y.Max = math.Max(minY, 1e-9)/1.5, maxY*math.Pow(maxY/math.Max(minY, 1e-9), 0.45)
	} else {
		p.Y.Min, p.Y.Max = 0, maxY*1.6
	}
	p.X.Min, p.X.Max = dodge(all)
	saturated := false
	for i, se := range all {
		saturated = saturated || len(se.sat) > 0
		if logY { // keep the bars' low ends above 0 on a log axis
			for j := range se.pts.lo {
				se.pts.lo[j] = math.Min(se.pts.lo[j], 0.9*se.pts.XYs[j].Y)
			}
		}
		l, pts, err := plotter.NewLinePoints(se.pts.XYs)
		if err != nil {
			continue
		}
		l.Color, pts.Color, pts.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
		l.Dashes = plotutil.Dashes(i)
		p.Add(l, pts)
		if eb, err := plotter.NewYErrorBars(se.pts); err == nil {
			eb.Color = plotutil.Color(i)
			p.Add(eb)
		}
		p.Legend.Add(rd.redact(se.cfg), l, pts)
		if len(se.sat) > 0 {
			if sc, err := plotter.NewScatter(se.sat); err == nil {
				sc.Shape, sc.Color, sc.Radius = draw.CrossGlyph{}, plotutil.Color(i), vg.Points(7)
				p.Add(sc)
			}
		}
	}
	p.Legend.Top, p.Legend.Left = true, true
	if saturated { // the cross is explained only where one is drawn
		p.Legend.Add("× saturated")
	}
	return p
}

// clipCIs clips the CIs of all to the axis, which follows the means: a CI
// wider than it is clipped at it (its numbers are in report.md), so one
// runaway cell cannot squash the rest. It returns the range of the bars
// and whether a bar was clipped enough to say so.
func clipCIs(all []rateSeriesData) (minY, maxY float64, clipped bool) {
	minMean, maxMean := math.Inf(1), math.Inf(-1)
	for _, se := range all {
		for _, xy := range se.pts.XYs {
			minMean, maxMean = math.Min(minMean, xy.Y), math.Max(maxMean, xy.Y)
		}
	}
	minY, maxY = math.Inf(1), math.Inf(-1)
	floor, ceil := minMean/10, maxMean*10
	for _, se := range all {
		for j, xy := range se.pts.XYs {
			if xy.Y-se.pts.lo[j] < floor {
				se.pts.lo[j], clipped = xy.Y-floor, clipped || xy.Y-se.pts.lo[j] < 0.1*xy.Y
			}
			if xy.Y+se.pts.hi[j] > ceil {
				se.pts.hi[j], clipped = ceil-xy.Y, true
			}
			minY, maxY = math.Min(minY, xy.Y-se.pts.lo[j]), math.Max(maxY, xy.Y+se.pts.hi[j])
		}
	}
	return minY, maxY, clipped
}

// dodge shifts each config's points a little, so that error bars at one
// rate do not hide each other, and returns the X axis's range: the rates
// with a margin at each side.
func dodge(all []rateSeriesData) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, se := range all {
		for _, xy := range se.pts.XYs {
			lo, hi = math.Min(lo, xy.X), math.Max(hi, xy.X)
		}
	}
	pad := math.Max((hi-lo)*0.05, 0.05*math.Max(hi, 1e-9))
	step := pad / 4 / math.Max(1, float64(len(all)))
	for i, se := range all {
		off := (float64(i) - float64(len(all)-1)/2) * step
		for j := range se.pts.XYs {
			se.pts.XYs[j].X += off
		}
		for j := range se.sat {
			se.sat[j].X += off
		}
	}
	return lo - pad, hi + pad
}

// ratesOf is the distinct rates of the cells at shape.
func ratesOf(ordered []*results.Cell, shape string) map[float64]bool {
	out := map[float64]bool{}
	for _, c := range ordered {
		if c.Info.Shape == shape {
			out[c.Info.Rate] = true
		}
	}
	return out
}

// rateSeries is one series of metric key's means per config at shape, with
// the cells graded saturated also in sat; a cell with no usable run but
// saturated runs is drawn at the mean of those (no CI), so that where
// saturation set in shows.
func rateSeries(s *results.Sweep, ordered []*results.Cell, shape, key string) []rateSeriesData {
	var all []rateSeriesData
	for _, cfg := range configsOf(ordered, s) {
		se := rateSeriesData{cfg: cfg}
		for _, c := range ordered {
			if c.Info.Config != cfg || c.Info.Shape != shape {
				continue
			}
			m, ok := plotted(c, key)
			if !ok || !(*m.Mean > 0) {
				continue
			}
			half := 0.0
			if m.HalfWidth != nil {
				half = *m.HalfWidth
			}
			se.pts.XYs = append(se.pts.XYs, plotter.XY{X: c.Info.Rate, Y: *m.Mean})
			se.pts.lo, se.pts.hi = append(se.pts.lo, half), append(se.pts.hi, half)
			if c.Saturated() {
				se.sat = append(se.sat, plotter.XY{X: c.Info.Rate, Y: *m.Mean})
			}
		}
		if len(se.pts.XYs) > 0 {
			all = append(all, se)
		}
	}
	return all
}

// rateSeriesData is one config's points on a plot against rate.
type rateSeriesData struct {
	cfg string
	pts errPoints
	sat plotter.XYs
}

// logTicks marks a log axis at 1, 2 and 5 per decade (labelled) and the
// other integers (minor), so values between powers of ten can be read.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi > lo) {
		return nil
	}
	var ts []plot.Tick
	decades := math.Ceil(math.Log10(hi)) - math.Floor(math.Log10(lo))
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		base := math.Pow(10, e)
		for m := 1; m < 10; m++ {
			v := float64(m) * base
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || ((m == 2 || m == 5) && decades <= 3) {
				t.Label = strconv.FormatFloat(v, 'g', 4, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// plotted is metric key of cell c as the plots draw it: its statistics
// over the usable runs, or, for a cell with none but with saturated runs,
// the mean of those (no CI), so that a plot shows where saturation set in
// (marked so) rather than leave the cell out.
func plotted(c *results.Cell, key string) (results.MetricStats, bool) {
	if m, ok := c.Sum.Metrics[key]; ok && m.Mean != nil {
		return m, true
	}
	if v, ok := saturatedMean(c, key); ok && c.Saturated() {
		return results.MetricStats{Mean: &v}, true
	}
	return results.MetricStats{}, false
}

// saturatedMean is the mean of metric key over the cell's saturated runs.
func saturatedMean(c *results.Cell, key string) (float64, bool) {
	var xs []float64
	for _, r := range c.Runs {
		if v, ok := r.Metrics[key]; ok && r.Sum != nil && (r.Sum.Saturated || r.Ref.Status == results.VerdictSaturated) {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return 0, false
	}
	return stats.Mean(xs), true
}
