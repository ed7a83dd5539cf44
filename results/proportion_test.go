package results

import (
	"testing"
)

// A cell's SLO attainment gets a Wilson interval over its blocks: inside
// [0, 100%] where the blocks disagree wildly (the Student-t interval was
// "67.0% ±71.0"), and below 100% where every request of three blocks met
// the SLO (the t interval had zero width there).
func TestSLOAttainmentInterval(t *testing.T) {
	cell := func(attain []float64, completed int) *Cell {
		c := &Cell{Info: CellInfo{ID: "c", Config: "plain", Shape: "s", Rate: 1}, Used: map[int]*Run{}}
		for i, a := range attain {
			met := int(a * float64(completed))
			s := &RunSummary{Completed: completed, SLOAttainment: &a, SLOMet: &met, Errors: map[string]int{}}
			r := &Run{Ref: RunRef{Cell: "c", Block: i + 1, Status: VerdictOK}, Sum: s, Metrics: RunMetrics(s)}
			c.Runs, c.Used[i+1] = append(c.Runs, r), r
		}
		return c
	}
	in := &Sweep{Confidence: 0.95}
	cases := []struct {
		name    string
		attain  []float64
		n       int
		lo, hi  float64 // bounds the interval must keep within
		widerLo float64 // the interval's low end must be below this
	}{
		{"blocks disagree", []float64{0.3, 1, 0.71}, 100, 0, 1, 0.5},
		{"every request met it", []float64{1, 1, 1}, 40, 0, 1, 1},
	}
	for _, c := range cases {
		cs := summarizeCell(cell(c.attain, c.n), in, len(c.attain))
		m := cs.Metrics[MetricSLOAttainment]
		if m.Interval != IntervalWilson || m.CILo == nil || m.CIHi == nil {
			t.Fatalf("%s: %+v, want a Wilson interval", c.name, m)
		}
		if *m.CILo < c.lo || *m.CIHi > c.hi || !(*m.CILo < c.widerLo) || !(*m.CILo <= *m.Mean && *m.Mean <= *m.CIHi) {
			t.Errorf("%s: mean %v interval [%v, %v]", c.name, *m.Mean, *m.CILo, *m.CIHi)
		}
	}
	// 100% in 3 blocks of 40 requests: the binomial floor of 120 requests,
	// Wilson with t(0.975, 2) = 4.30: low end 120/(120 + 4.30²) = 0.866.
	m := summarizeCell(cell([]float64{1, 1, 1}, 40), in, 3).Metrics[MetricSLOAttainment]
	if !near(*m.CILo, 120/(120+4.302653*4.302653), 1e-4) || *m.CIHi != 1 {
		t.Errorf("all met: [%v, %v], want [0.866, 1]", *m.CILo, *m.CIHi)
	}
	// A metric that is not a proportion keeps its Student-t interval.
	if g := summarizeCell(cell([]float64{0.3, 1, 0.71}, 100), in, 3).Metrics["completed"]; g.Interval != "" {
		t.Errorf("completed: interval %q", g.Interval)
	}
}
