package report

import (
	"bytes"
	"fmt"
	"image/color"
	"path/filepath"
	"sort"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// timelineOf is the base name of the run's timeline in plots/ and whether
// it has one: every run that is not a result, whose directory lies inside
// the sweep's, gets one (writePlots), and report.md and report.html link
// it from the run's line. The name is the cell's and the run directory's
// (b<k>, or b<k>-try<n> for a run again in place), so that no two runs
// share one.
func timelineOf(c *results.Cell, r *results.Run) (string, bool) {
	if r.IsResult() || !filepath.IsLocal(r.Ref.Dir) {
		return "", false
	}
	return "timeline_" + fileSafe(c.Info.ID) + "_" + fileSafe(filepath.Base(r.Ref.Dir)), true
}

// timelineLink is the path of the run's timeline relative to the sweep
// directory (where report.md and report.html are), "" without one.
func timelineLink(c *results.Cell, r *results.Run) string {
	if name, ok := timelineOf(c, r); ok {
		return "plots/" + name + ".svg"
	}
	return ""
}

// timelinePlots draws a run over its time from its requests.jsonl: on top
// each request's TTFT at its send time (failed requests marked at their
// end), below the requests in flight and the engine's queue (num_waiting
// of its step log, whose first line is placed at the first measured send:
// the two clocks are not the same). A run that sent nothing (its engine did
// not start) gets the plot, empty, with that said in its title.
func timelinePlots(rd renderer, s *results.Sweep, c *results.Cell, r *results.Run) []*plot.Plot {
	recs, err := rd.logs.Requests(r.Ref.Dir)
	if err != nil {
		rd.warn("timeline: %v", err)
	}
	var sent []openloop.Record
	for _, x := range recs {
		if x.SentNs > 0 {
			sent = append(sent, x)
		}
	}
	sort.Slice(sent, func(i, j int) bool { return sent[i].SentNs < sent[j].SentNs })
	var t0 int64
	if len(sent) > 0 {
		t0 = sent[0].SentNs
	}
	sec := func(ns int64) float64 { return float64(ns-t0) / 1e9 }
	title := fmt.Sprintf("Run %s b%d (%s, rate=%g, %s): %s", c.Info.ID, r.Ref.Block, c.Info.Config, c.Info.Rate, c.Info.Shape, r.Ref.Status)
	if len(sent) == 0 {
		title += " (no request was sent)"
	}
	top, firstMeasure := ttftTimeline(rd, s, title, sent, sec)
	bottom := loadTimeline(rd, s, r.Ref.Dir, sent, sec, sec(firstMeasure))
	lo, hi := min(top.X.Min, bottom.X.Min, 0), max(top.X.Max, bottom.X.Max, 1)
	top.X.Min, top.X.Max, bottom.X.Min, bottom.X.Max = lo, hi, lo, hi
	if top.Y.Min > top.Y.Max { // nothing on top
		top.Y.Min, top.Y.Max = 0, 1
	}
	top.Y.Max += 0.3 * (top.Y.Max - top.Y.Min) // headroom for the legends
	bottom.Y.Max = 1.4 * max(bottom.Y.Max, 1)
	return []*plot.Plot{top, bottom}
}

// ttftTimeline is the top of a timeline: each sent request's TTFT at its
// send, failed ones at their end. It returns the first measured send too.
func ttftTimeline(rd renderer, s *results.Sweep, title string, sent []openloop.Record, sec func(int64) float64) (*plot.Plot, int64) {
	top := newPlot(rd, s, title, "", "TTFT (ms)")
	var ttft, failed plotter.XYs
	var firstMeasure int64
	for _, x := range sent {
		if x.Phase == openloop.PhaseMeasure && firstMeasure == 0 {
			firstMeasure = x.SentNs
		}
		t, measured := x.TTFTMs()
		switch {
		case x.OK() && measured:
			ttft = append(ttft, plotter.XY{X: sec(x.SentNs), Y: t})
		case !x.OK():
			failed = append(failed, plotter.XY{X: sec(max(x.DoneNs, x.SentNs)), Y: 0})
		}
	}
	if sc, err := plotter.NewScatter(ttft); err == nil && len(ttft) > 0 {
		sc.Color, sc.Radius = color.RGBA{R: 40, G: 80, B: 200, A: 255}, vg.Points(1.5)
		top.Add(sc)
		top.Legend.Add("TTFT of each request, at its send", sc)
	}
	if sc, err := plotter.NewScatter(failed); err == nil && len(failed) > 0 {
		sc.Color, sc.Shape, sc.Radius = color.RGBA{R: 200, G: 40, B: 40, A: 255}, draw.CrossGlyph{}, vg.Points(3)
		top.Add(sc)
		top.Legend.Add(fmt.Sprintf("failed (%d), at its end", len(failed)), sc)
	}
	top.Legend.Top = true
	return top, firstMeasure
}

// loadTimeline is the bottom of a timeline: the requests in flight and the
// engine's queue from the step log of run dir, whose first step is placed
// at measureAt (s).
func loadTimeline(rd renderer, s *results.Sweep, dir string, sent []openloop.Record, sec func(int64) float64, measureAt float64) *plot.Plot {
	bottom := newPlot(rd, s, "", "time since the first send (s)", "requests")
	bottom.Title.Text = ""
	type ev struct {
		t int64
		d int
	}
	evs := make([]ev, 0, 2*len(sent))
	for _, x := range sent {
		evs = append(evs, ev{x.SentNs, 1})
		if x.DoneNs > 0 {
			evs = append(evs, ev{x.DoneNs, -1})
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].t < evs[j].t || evs[i].t == evs[j].t && evs[i].d < evs[j].d })
	inflight := plotter.XYs{{X: 0, Y: 0}}
	n := 0
	for _, e := range evs {
		inflight = append(inflight, plotter.XY{X: sec(e.t), Y: float64(n)})
		n += e.d
		inflight = append(inflight, plotter.XY{X: sec(e.t), Y: float64(n)})
	}
	if l, err := plotter.NewLine(inflight); err == nil {
		l.Color = color.RGBA{R: 40, G: 80, B: 200, A: 255}
		bottom.Add(l)
		bottom.Legend.Add("in flight (sent, not ended)", l)
	}
	var queue plotter.XYs
	var firstStep int64
	if err := rd.logs.StepWaiting(dir, func(tsUs int64, w float64) {
		if firstStep == 0 {
			firstStep = tsUs
		}
		queue = append(queue, plotter.XY{X: measureAt + float64(tsUs-firstStep)/1e6, Y: w})
	}); err != nil {
		rd.warn("timeline: %v", err)
	}
	if l, err := plotter.NewLine(queue); err == nil && len(queue) > 0 {
		l.Color, l.Dashes = color.RGBA{R: 200, G: 120, B: 0, A: 255}, []vg.Length{vg.Points(3), vg.Points(2)}
		bottom.Add(l)
		bottom.Legend.Add("engine queue (num_waiting; step log from the first measured send)", l)
	}
	bottom.Legend.Top = true
	bottom.Y.Min = 0
	return bottom
}

// saveStacked draws plots one above the other, aligned, into base.png and
// base.svg.
func saveStacked(rd renderer, save func(name string, data []byte) error, ps []*plot.Plot, base string) error {
	w, h := plotW, plotH*1.4
	for _, format := range []string{"png", "svg"} {
		var buf bytes.Buffer
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("drawing failed: %v", r)
				}
			}()
			var c vg.CanvasWriterTo
			if format == "png" {
				c = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
			} else {
				c = vgsvg.New(w, h)
			}
			tiles := plot.Align([][]*plot.Plot{{ps[0]}, {ps[1]}}, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Millimeter * 2}, draw.New(c))
			ps[0].Draw(tiles[0][0])
			ps[1].Draw(tiles[1][0])
			_, err = c.WriteTo(&buf)
			return err
		}()
		if err != nil {
			rd.warn("plot %s.%s not drawn: %v", base, format, err)
			continue
		}
		if err := save(base+"."+format, buf.Bytes()); err != nil {
			return err
		}
	}
	return nil
}
