package report

import (
	"strings"
	"testing"

	"github.com/mbench/mbench/results"
)

// A cell's SLO attainment is shown with its Wilson interval, in percent,
// never as "mean ±half" (the Student-t interval was "67.0% ±71.0").
func TestSLOAttainmentText(t *testing.T) {
	for _, c := range []struct {
		name   string
		attain []float64
		n      int
		text   string // proportionCI's text, a prefix
	}{
		{"blocks disagree", []float64{0.3, 1, 0.71}, 100, "67.0% ["},
		{"every request met it", []float64{1, 1, 1}, 40, "100.0% ["},
	} {
		sw := results.Sweep{Confidence: 0.95, Cells: []results.CellInfo{{ID: "c", Config: "plain", Shape: "s", Rate: 1}}}
		sums := map[string]*results.RunSummary{}
		for i, a := range c.attain {
			met, dir := int(a*float64(c.n)), "b"+string(rune('1'+i))
			sums[dir] = &results.RunSummary{Completed: c.n, SLOAttainment: &a, SLOMet: &met, Errors: map[string]int{}}
			sw.Runs = append(sw.Runs, results.RunRef{Cell: "c", Block: i + 1, Dir: dir, Status: results.VerdictOK})
		}
		a, err := results.Analyze(sw, func(ref results.RunRef) (results.RunFile, error) { return results.RunFile{Sum: sums[ref.Dir]}, nil })
		if err != nil {
			t.Fatal(err)
		}
		m := a.Cells[0].Sum.Metrics[results.MetricSLOAttainment]
		if m.Interval != results.IntervalWilson {
			t.Fatalf("%s: %+v, want a Wilson interval", c.name, m)
		}
		if got := proportionCI(m); !strings.HasPrefix(got, c.text) || strings.Contains(got, "±") {
			t.Errorf("%s: %q", c.name, got)
		}
	}
}
