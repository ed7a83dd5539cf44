package report

import (
	"strings"
	"testing"

	"github.com/mbench/mbench/results"
)

// TestOutputLengthsSaysWhatWasAsked: the section's one-line forms follow the
// requests the runs made, whichever runs are usable. A sweep of natural
// lengths whose runs were all graded out (client_limited by timing) is not
// called fixed; its usable runs' lengths are drawn when there are some.
func TestOutputLengthsSaysWhatWasAsked(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	run := func(natural bool) *results.Run {
		s := &results.RunSummary{NaturalLength: natural}
		if natural {
			s.OutputLengths = &results.LengthStats{N: 10, Mean: f(20), Median: f(19), P90: f(30), Max: 32}
		}
		return &results.Run{Sum: s}
	}
	cell := func(used bool, runs ...*results.Run) *results.Cell {
		c := &results.Cell{Info: results.CellInfo{Config: "plain", Shape: "64x8", Rate: 20}, Runs: runs, Used: map[int]*results.Run{}}
		if used {
			for i, r := range runs {
				c.Used[i] = r
			}
		}
		return c
	}
	for _, tc := range []struct {
		name        string
		cells       []*results.Cell
		want, wrong string
	}{
		{"natural, usable", []*results.Cell{cell(true, run(true))}, "| plain | 64x8 | 20 | 20.0 | 19.0 | 30.0 | 32.0 | 1 |", "fixed"},
		{"natural, none usable", []*results.Cell{cell(false, run(true), run(true))}, "**Output lengths**: natural: the engine ended each output (request.ignore_eos: false) in 2 runs, but no usable run", "fixed"},
		{"fixed", []*results.Cell{cell(true, run(false)), cell(false, run(false))}, "**Output lengths**: fixed: every request asked for max_tokens = min_tokens", "natural"},
		{"no summary read", []*results.Cell{cell(false, &results.Run{})}, "**Output lengths**: fixed:", "natural"},
	} {
		var b strings.Builder
		renderOutputLengths(&b, &reportView{ordered: tc.cells})
		if got := b.String(); !strings.Contains(got, tc.want) || strings.Contains(got, tc.wrong) {
			t.Errorf("%s: want %q and not %q in:\n%s", tc.name, tc.want, tc.wrong, got)
		}
	}
}
