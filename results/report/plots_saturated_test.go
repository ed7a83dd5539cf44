package report

import (
	"testing"
)

// A cell whose every run was saturated has no usable run, yet the TTFT plot
// shows it, marked saturated, at the mean of its runs: the knee shows
// instead of the line stopping short of it.
func TestTTFTPlotShowsSaturatedCells(t *testing.T) {
	dir := copyTree(t, fixtureDir)
	a := analyzeDir(t, fixtureSweep(dir))
	cells := a.Cells
	var noop *rateSeriesData
	for _, se := range rateSeries(&a.Sweep, cells, "4096x256", "p90_ttft_ms") {
		if se.cfg == "noop_connector" {
			noop = &se
		}
	}
	if noop == nil {
		t.Fatal("no noop_connector series")
	}
	var want float64
	for _, c := range cells {
		if c.Info.ID == "noop-r2" {
			v, ok := saturatedMean(c, "p90_ttft_ms")
			if !ok || c.Sum.NRuns != 0 {
				t.Fatalf("noop-r2: saturated mean %v %v, n_runs %d", v, ok, c.Sum.NRuns)
			}
			want = v
		}
	}
	found := false
	for _, xy := range noop.sat {
		found = found || (xy.X == 2 && xy.Y == want)
	}
	if !found || len(noop.pts.XYs) != 2 {
		t.Errorf("noop_connector points %v, saturated %v: want rate 2 at %v marked saturated", noop.pts.XYs, noop.sat, want)
	}
}
