package report

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/stats"

	"github.com/mbench/mbench/probes"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plots drawn from the runs' raw logs: engine steps and GPU samples.

// stepCDFPlot draws the CDF of step_duration_us per config from the runs'
// step logs, or returns nil when no run has one.
func stepCDFPlot(ctx context.Context, rd renderer, s *results.Sweep, ordered []*results.Cell) *plot.Plot {
	p := newPlot(rd, s, "Engine step duration CDF", "step_duration (µs, log scale)", "fraction of steps ≤ x")
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
	p.Y.Min, p.Y.Max = 0, 1
	drawn := 0
	for i, cfg := range configsOf(ordered, s) {
		res := reservoir{rng: rand.New(rand.NewPCG(uint64(i)+1, 0x5eed))}
		for _, c := range ordered {
			for _, r := range c.Runs {
				if c.Info.Config != cfg || r.Sum == nil || r.Problem != "" || ctx.Err() != nil {
					continue
				}
				if err := rd.logs.StepDurations(r.Ref.Dir, res.add); err != nil {
					rd.warn("step CDF: %v", err)
				}
			}
		}
		if addCDF(p, i, res.xs, fmt.Sprintf("%s (%d steps)", rd.redact(cfg), res.seen)) {
			drawn++
		}
	}
	return finishCDF(p, drawn)
}

// addCDF draws the empirical CDF of xs (sorted in place) as the i-th line
// of p; false when there is nothing to draw.
func addCDF(p *plot.Plot, i int, xs []float64, label string) bool {
	if len(xs) == 0 {
		return false
	}
	sort.Float64s(xs)
	const points = 500
	xys := make(plotter.XYs, 0, points+1)
	for k := 0; k <= points; k++ {
		q := float64(k) / points
		xys = append(xys, plotter.XY{X: stats.PercentileSorted(xs, 100*q), Y: q})
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return false
	}
	l.Color, l.Dashes, l.Width = plotutil.Color(i), plotutil.Dashes(i), vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(label, l)
	return true
}

// finishCDF sets a CDF plot's axis and legend room for drawn lines; nil
// when none was drawn.
func finishCDF(p *plot.Plot, drawn int) *plot.Plot {
	if drawn == 0 {
		return nil
	}
	p.Y.Max = 1 + 0.075*float64(drawn) // headroom above the curves for the legend
	p.Y.Tick.Marker = plot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 0.25, Label: "0.25"}, {Value: 0.5, Label: "0.5"}, {Value: 0.75, Label: "0.75"}, {Value: 1, Label: "1"}}
	p.Legend.Top, p.Legend.Left = true, true
	return p
}

// requestCDFPlot draws the CDF of each request's latency lat (TTFT,
// TPOT), one line per config (per config and rate where the
// sweep has several rates), from the measured requests of the runs that
// are results; nil when no run has a requests.jsonl.
func requestCDFPlot(ctx context.Context, rd renderer, s *results.Sweep, ordered []*results.Cell, lat results.Latency) *plot.Plot {
	name := strings.ToUpper(lat.Name)
	p := newPlot(rd, s, "Per-request "+name+" CDF", name+" (ms, log scale)", "fraction of requests ≤ x")
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
	p.Y.Min, p.Y.Max = 0, 1
	rates := map[float64]bool{}
	for _, c := range ordered {
		rates[c.Info.Rate] = true
	}
	type key struct {
		cfg  string
		rate float64
	}
	var order []key
	xs := map[key][]float64{}
	for _, c := range ordered {
		k := key{c.Info.Config, c.Info.Rate}
		if len(rates) == 1 {
			k.rate = 0
		}
		for _, r := range c.Runs {
			if r.Sum == nil || r.Problem != "" || !r.Ref.Status.Usable() || ctx.Err() != nil {
				continue
			}
			recs, err := rd.logs.Requests(r.Ref.Dir)
			if err != nil {
				rd.warn("%s CDF: %v", lat.Name, err)
			}
			for _, x := range recs {
				if x.Phase != openloop.PhaseMeasure || !x.OK() {
					continue
				}
				if v := lat.Append(nil, &x); len(v) == 1 && v[0] > 0 {
					if _, seen := xs[k]; !seen {
						order = append(order, k)
					}
					xs[k] = append(xs[k], v[0])
				}
			}
		}
	}
	drawn := 0
	for i, k := range order {
		label := rd.redact(k.cfg)
		if k.rate != 0 {
			label += fmt.Sprintf(" @ rate=%g", k.rate)
		}
		if addCDF(p, i, xs[k], fmt.Sprintf("%s (%d requests)", label, len(xs[k]))) {
			drawn++
		}
	}
	return finishCDF(p, drawn)
}

// reservoir keeps a uniform random sample of at most stepSampleCap values.
type reservoir struct {
	rng  *rand.Rand
	xs   []float64
	seen int
}

// add offers one value to the sample.
func (r *reservoir) add(x float64) {
	r.seen++
	if len(r.xs) < stepSampleCap {
		r.xs = append(r.xs, x)
		return
	}
	if j := r.rng.IntN(r.seen); j < stepSampleCap {
		r.xs[j] = x
	}
}

// gpuSamples is a run's GPU samples per GPU, sorted by time, and the
// first sample's time (µs); nil when the run has none. A bad line is a
// warning: what was read before it is kept.
func gpuSamples(rd renderer, r *results.Run, what string) (map[probes.GPUKey][]probes.GPUSample, int64) {
	samples, err := rd.logs.GPUSamples(r.Ref.Dir)
	if err != nil {
		rd.warn("%s: %v", what, err)
	}
	series := map[probes.GPUKey][]probes.GPUSample{}
	first := int64(math.MaxInt64)
	for _, v := range samples {
		if v.TsUs <= 0 {
			continue
		}
		first = min(first, v.TsUs)
		k := probes.GPUKey{Host: v.Host, GPU: v.GPU}
		series[k] = append(series[k], v)
	}
	if len(series) == 0 {
		return nil, 0
	}
	for _, xs := range series {
		sort.SliceStable(xs, func(a, b int) bool { return xs[a].TsUs < xs[b].TsUs })
	}
	return series, first
}

// gpuPlot draws GPU utilisation over time for one run from its samples, or
// returns nil when the run has none.
func gpuPlot(rd renderer, s *results.Sweep, c *results.Cell, r *results.Run) *plot.Plot {
	series, first := gpuSamples(rd, r, "gpu plot")
	if len(series) == 0 {
		return nil
	}
	title := fmt.Sprintf("GPU utilisation: %s b%d (%s, rate=%g, %s)", c.Info.ID, r.Ref.Block, c.Info.Config, c.Info.Rate, c.Info.Shape)
	p := newPlot(rd, s, title, "time since first sample (s)", "GPU utilisation (%)")
	p.Y.Min, p.Y.Max = 0, 100+15*float64(len(series)) // headroom for the legend
	p.Y.Tick.Marker = plot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 25, Label: "25"}, {Value: 50, Label: "50"}, {Value: 75, Label: "75"}, {Value: 100, Label: "100"}}
	for i, k := range probes.SortedGPUKeys(series) {
		xys := make(plotter.XYs, len(series[k]))
		for j, v := range series[k] {
			xys[j] = plotter.XY{X: float64(v.TsUs-first) / 1e6, Y: v.UtilGPU}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			continue
		}
		l.Color, l.Dashes = plotutil.Color(i), plotutil.Dashes(i)
		p.Add(l)
		p.Legend.Add(rd.redact(fmt.Sprintf("%s gpu%d", k.Host, k.GPU)), l)
	}
	p.Legend.Top = true
	return p
}
