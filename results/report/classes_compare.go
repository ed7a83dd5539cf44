package report

import (
	"cmp"
	"fmt"

	"github.com/mbench/mbench/results"
)

// renderClassComparisons writes the per-class comparisons with the
// baseline over the same requests; one line when there are none.
var renderClassComparisons = tableSection("Request classes compared", classComparisonTables)

// classComparisonTables is the table of classComparisons.
func classComparisonTables(v *reportView) ([]sectionTable, string) {
	rows := v.a.Classes
	if len(rows) == 0 {
		return nil, fmt.Sprintf("no class has requests completed under both a config and the baseline %s.", cmp.Or(v.s.Baseline, "(none)"))
	}
	conf := v.s.Confidence // 0: the 95% default
	if conf <= 0 || conf >= 1 {
		conf = 0.95
	}
	t := sectionTable{ID: "class-comparisons", Title: "Request classes compared with the baseline",
		Intro: fmt.Sprintf("Each class over the same requests: per block the requests of the class that completed under both runs (by request id), "+
			"their TTFT median and p90 on each side, compared across blocks (change with %g%% CI; paired t). "+
			"Paired = requests per block, dropped = the class's requests that failed on either side (means over blocks).", 100*conf),
		Head: []string{"Config", "vs", "Shape", "Rate", "Class", "Paired", "Dropped", "TTFT p50 (base → config, ms)", "TTFT p50 change", "TTFT p90 change", "Blocks"}}
	if basis, _ := classesUsed(v.ordered); basis.DependsOnRouting() {
		t.Notes = append(t.Notes, "The classes are the router's estimates, which differ between configs: a request is compared in a class only when both configs put it there.")
	}
	for _, r := range rows {
		t.Rows = append(t.Rows, []string{r.Config, r.Baseline, r.Shape, fmtFloat(r.Rate), r.Class,
			fmtCount(r.Paired), fmtCount(r.Dropped), fmtNum(r.BaseP50) + " → " + fmtNum(r.P50), changeText(r.TTFTP50, r.BaseP50, r.P50),
			changeText(r.TTFTP90, r.BaseP90, r.P90), fmt.Sprint(r.TTFTP50.N)})
	}
	return []sectionTable{t}, ""
}

// changeText is a comparison's effect with its CI; with one block, the
// change of that block (base → treat) without one.
func changeText(c results.Comparison, base, treat float64) string {
	if c.N < 2 {
		if base <= 0 {
			return "—"
		}
		return fmt.Sprintf("%+.1f%% (one block: no CI)", 100*(treat/base-1))
	}
	return fmt.Sprintf("%+.1f%% [%+.1f%%, %+.1f%%]", 100*c.Effect, 100*c.Lo, 100*c.Hi)
}
