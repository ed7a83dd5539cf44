package report

import (
	"strings"
	"testing"

	"github.com/mbench/mbench/results"
)

// TestClientLimitedSaysWhatHappened: "kept to its schedule" only when no run
// fell behind; runs that did and were graded out are counted, not denied;
// a used client-limited run is listed.
func TestClientLimitedSaysWhatHappened(t *testing.T) {
	cell := func(runs ...results.CellRun) *results.Cell {
		return &results.Cell{Info: results.CellInfo{ID: "c1", Config: "plain", Shape: "64x8", Rate: 20}, Sum: results.CellSummary{Runs: runs}}
	}
	ok := results.CellRun{Block: 1, Status: results.VerdictOK, Used: true}
	graded := results.CellRun{Block: 2, Status: results.VerdictClientLimited, ClientLimited: true}
	usedCL := results.CellRun{Block: 3, Status: results.VerdictOK, Used: true, ClientLimited: true, ClientLimitedReason: "sends late"}
	for _, tc := range []struct {
		name        string
		runs        []results.CellRun
		want, wrong string
	}{
		{"none fell behind", []results.CellRun{ok}, "none: in every run the load generator kept to its schedule", "fell behind"},
		{"one graded out", []results.CellRun{ok, graded}, "none among the results; 1 run in which the load generator fell behind its schedule is not a result", "kept to its schedule ("},
		{"two graded out", []results.CellRun{graded, graded}, "2 runs in which the load generator fell behind its schedule are not results", "kept to its schedule ("},
		{"a used one", []results.CellRun{usedCL, graded}, "- c1 b3 (plain, rate=20, 64x8): sends late.", "none"},
	} {
		var b strings.Builder
		renderClientLimited(&b, &reportView{ordered: []*results.Cell{cell(tc.runs...)}})
		if got := b.String(); !strings.Contains(got, tc.want) || strings.Contains(got, tc.wrong) {
			t.Errorf("%s: want %q and not %q in:\n%s", tc.name, tc.want, tc.wrong, got)
		}
	}
}
