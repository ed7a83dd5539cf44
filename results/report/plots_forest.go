package report

import (
	"fmt"
	"image/color"

	"github.com/mbench/mbench/results"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// forestPlot draws every comparison on the primary metric as a row: the
// change in percent with its CI (the headline as a picture), the A/A
// controls' rows beside in grey, a line at no change. A row without a CI
// (fewer than two blocks, a side with no usable run) is named but not
// drawn. nil when there is no comparison.
func forestPlot(rd renderer, a *results.Analysis) *plot.Plot {
	rows, aa := primaryRows(a)
	if len(rows) == 0 {
		return nil
	}
	s := &a.Sweep
	p := newPlot(rd, s, "Change of "+s.Metric+" against the baseline, with its CI", "change (%), "+fmt.Sprintf("%.0f%% CI", 100*s.Confidence), "")
	n := len(rows)
	var ticks []plot.Tick
	var found, noise, control errXPoints
	lo, hi := 0.0, 0.0
	for i, r := range rows {
		y := float64(n - i) // the first row on top
		label := fmt.Sprintf("%s vs %s, rate=%g %s", r.Config, r.Baseline, r.Rate, r.Shape)
		if aa[i] {
			label = "A/A " + label
		}
		if r.Note != "" || r.N < 2 {
			label += ": " + r.Text()
		}
		ticks = append(ticks, plot.Tick{Value: y, Label: rd.redact(label)})
		if r.Note != "" || r.N < 2 {
			continue
		}
		pt := plotter.XY{X: 100 * r.Effect, Y: y}
		dst := &noise
		switch {
		case aa[i]:
			dst = &control
		case r.Significant():
			dst = &found
		}
		dst.XYs = append(dst.XYs, pt)
		dst.lo = append(dst.lo, 100*(r.Effect-r.Lo))
		dst.hi = append(dst.hi, 100*(r.Hi-r.Effect))
		lo, hi = min(lo, 100*r.Lo), max(hi, 100*r.Hi)
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = 0.4, float64(n)+1.4 // headroom for the legend
	pad := max((hi-lo)*0.08, 1)
	p.X.Min, p.X.Max = lo-pad, hi+pad
	if l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: p.Y.Min}, {X: 0, Y: p.Y.Max}}); err == nil {
		l.Color, l.Dashes = color.Gray{Y: 90}, []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
	}
	for _, g := range []struct {
		pts   errXPoints
		name  string
		color color.Color
		shape draw.GlyphDrawer
	}{
		{found, "a change (CI excludes 0, Holm)", color.RGBA{R: 200, G: 40, B: 40, A: 255}, draw.CircleGlyph{}},
		{noise, "within noise", color.RGBA{R: 40, G: 80, B: 200, A: 255}, draw.RingGlyph{}},
		{control, "A/A control", color.Gray{Y: 110}, draw.SquareGlyph{}},
	} {
		if len(g.pts.XYs) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(g.pts.XYs)
		if err != nil {
			continue
		}
		sc.Color, sc.Shape, sc.Radius = g.color, g.shape, vg.Points(3.5)
		p.Add(sc)
		if eb, err := plotter.NewXErrorBars(g.pts); err == nil {
			eb.Color = g.color
			p.Add(eb)
		}
		p.Legend.Add(g.name, sc)
	}
	p.Legend.Top = true
	return p
}

// primaryRows are the comparisons on the primary metric, then the A/A
// controls' (aa[i] marks those).
func primaryRows(a *results.Analysis) (rows []results.ComparisonRow, aa []bool) {
	for _, set := range []struct {
		rows []results.ComparisonRow
		aa   bool
	}{{a.Comparisons, false}, {a.NoiseFloor, true}} {
		for _, r := range set.rows {
			if r.Primary {
				rows, aa = append(rows, r), append(aa, set.aa)
			}
		}
	}
	return rows, aa
}

// errXPoints are points with asymmetric X errors.
type errXPoints struct {
	plotter.XYs
	lo, hi []float64
}

// XError implements plotter.XErrorer.
func (e errXPoints) XError(i int) (float64, float64) { return e.lo[i], e.hi[i] }
