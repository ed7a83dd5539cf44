package report

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/mbench/mbench/results"
)

// renderClasses writes the request-class table (DefaultClassBounds); one line
// when no run has per-class figures or every request is of one class.
var renderClasses = tableSection("Request classes", classTables)

// classTables is the request-class table from the cells' means over runs:
// per class its completed requests, share, input p50 and latencies; or,
// when there is nothing to show, the one line that says why.
func classTables(v *reportView) ([]sectionTable, string) {
	ordered := v.ordered
	if !results.AnyCellHas(ordered, "class_warm_share") {
		return nil, "no run has per-class figures."
	}
	basis, bd := classesUsed(ordered)
	if only, ok := singleClass(ordered); ok {
		return nil, fmt.Sprintf("every measured request of every cell is %s (by %s; WARM < %d, MEDIUM < %d, HEAVY < %d, HEAVY+ above): one class, whose figures are the cells' own.", only, basisWords(basis), bd[0], bd[1], bd[2])
	}
	t := sectionTable{ID: "classes", Title: "Request classes",
		Intro: fmt.Sprintf("By %s: WARM < %d, MEDIUM < %d, HEAVY < %d, HEAVY+ above. Count = completed requests, share = of the run's completed, "+
			"input p50 in tokens; latencies in ms. Means over runs.", basisWords(basis), bd[0], bd[1], bd[2]),
		Head: []string{"Config", "Shape", "Rate", "Class", "Count", "Share", "Input p50", "TTFT p50", "TTFT p90", "TPOT p90", "E2EL p50"}}
	if basis.DependsOnRouting() {
		t.Notes = append(t.Notes, "**These classes depend on the routing**: a request's class is the router's estimate of its uncached tokens on the instance its policy chose, "+
			"so the same request can be HEAVY under one config and WARM under another, and rows of different configs describe different requests. "+
			"For comparisons between configs use class_basis: ideal_new_tokens (the default for traces) or input_tokens.")
	}
	for _, c := range ordered {
		m := c.Sum.Metrics
		for _, n := range results.ClassNames {
			p := results.ClassMetric(n, "")
			share, ok := m[p+results.ClassShare]
			if !ok || share.Mean == nil || *share.Mean == 0 {
				continue
			}
			t.Rows = append(t.Rows, []string{c.Info.Config, c.Info.Shape, fmtFloat(c.Info.Rate), n,
				countOf(m, p+results.ClassCompleted), fmtPct(share.Mean), meanOrDash(m, p+results.ClassInputP50), meanOrDash(m, p+results.TTFT.Key(results.StatMedian)),
				meanOrDash(m, p+ttftP90), meanOrDash(m, p+results.TPOT.Key(results.StatP90)), meanOrDash(m, p+results.E2EL.Key(results.StatMedian))})
		}
	}
	return []sectionTable{t}, ""
}

// renderClassFailures writes failures by request class;
// one line when no measured request failed.
var renderClassFailures = tableSection("Failures by request class", classFailureTables)

// classFailureTables: per cell and class the measured requests, the failed
// ones, their rate and error classes, and the input p50 of the failed (in the
// agentic experiments the elastic config's failures were Mooncake transfer
// timeouts on > 60k-token requests).
func classFailureTables(v *reportView) ([]sectionTable, string) {
	ordered := v.ordered
	if !results.AnyCellHas(ordered, "class_warm_failed") || allZero(ordered, "class_warm_failed", "class_medium_failed", "class_heavy_failed", "class_heavy_plus_failed") {
		return nil, "no measured request failed in any run."
	}
	basis, _ := classesUsed(ordered)
	t := sectionTable{ID: "class-failures", Title: "Failures by request class",
		Intro: fmt.Sprintf("Measured requests and failures per class (by %s), means over runs; how = error classes over all runs. "+
			"Configs whose failure rates differ cannot be compared on the survivors' latency alone: see docs/routing.md, \"Comparing configs whose failure rates differ\".", basisWords(basis)),
		Head: []string{"Config", "Shape", "Rate", "Class", "Requests", "Failed", "Fail rate", "Failed input p50", "How"}}
	for _, c := range ordered {
		m := c.Sum.Metrics
		for ci, n := range results.ClassNames {
			p := results.ClassMetric(n, "")
			if !hasMetric(m, p+results.ClassFailed) || *m[p+results.ClassFailed].Mean == 0 {
				continue
			}
			t.Rows = append(t.Rows, []string{c.Info.Config, c.Info.Shape, fmtFloat(c.Info.Rate), n,
				countOf(m, p+results.ClassRequests), countOf(m, p+results.ClassFailed), pctOf(m, p+results.ClassFailRate), meanOrDash(m, p+results.ClassFailedInputP50),
				failureModes(c, ci)})
		}
	}
	return []sectionTable{t}, ""
}

// failureModes lists a class's error classes over the cell's runs with
// their counts, most frequent first.
func failureModes(c *results.Cell, class int) string {
	counts := map[string]int{}
	for _, r := range c.Runs {
		if r.Sum == nil || r.Sum.Classes == nil || class >= len(r.Sum.Classes.Classes) {
			continue
		}
		for k, n := range r.Sum.Classes.Classes[class].FailedBy {
			counts[k] += n
		}
	}
	keys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(counts[b]-counts[a], strings.Compare(a, b)) })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s ×%d", cmp.Or(k, "unclassified"), counts[k]))
	}
	return strings.Join(parts, ", ")
}

// countOf is a count's mean over runs: whole when it is, else to one
// decimal; "—" when absent.
func countOf(m map[string]results.MetricStats, k string) string {
	if v := m[k].Mean; v != nil {
		return fmtCount(*v)
	}
	return "—"
}

func fmtCount(x float64) string {
	if x == math.Trunc(x) {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.1f", x)
}

// classesUsed are the class basis and bounds the runs used (the first run
// that recorded them), else the defaults.
func classesUsed(ordered []*results.Cell) (results.ClassBasis, [3]int) {
	for _, c := range ordered {
		for _, r := range c.Runs {
			if r.Sum != nil && r.Sum.Classes != nil {
				return r.Sum.Classes.Basis, r.Sum.Classes.Bounds
			}
		}
	}
	return results.ClassByInputTokens, results.DefaultClassBounds
}

// basisWords says in words what requests are classed by.
func basisWords(b results.ClassBasis) string {
	switch b {
	case results.ClassByIdealNewTokens:
		return "new prompt tokens against an ideal cache, from the trace's hash ids — the same requests are in the same class under every config"
	case results.ClassByRouterNewTokens:
		return "the router's estimate of new prompt tokens on the instance it chose"
	}
	return "prompt tokens"
}

// singleClass reports the one class every cell with class figures falls
// in entirely (every run's share of it is 1), when there is one.
func singleClass(ordered []*results.Cell) (string, bool) {
	only := ""
	for _, c := range ordered {
		for _, n := range results.ClassNames {
			share, ok := c.Sum.Metrics[results.ClassMetric(n, results.ClassShare)]
			if !ok || share.Mean == nil {
				continue
			}
			for _, x := range share.Values {
				switch {
				case x == 0:
				case x == 1 && (only == "" || only == n):
					only = n
				default:
					return "", false
				}
			}
		}
	}
	return only, only != ""
}

// allZero reports whether every run of every cell has each of keys zero
// or absent.
func allZero(ordered []*results.Cell, keys ...string) bool {
	for _, c := range ordered {
		for _, k := range keys {
			for _, x := range c.Sum.Metrics[k].Values {
				if x != 0 {
					return false
				}
			}
		}
	}
	return true
}

// meanOrDash is a metric's mean across runs, or "—".
func meanOrDash(m map[string]results.MetricStats, k string) string {
	if v := m[k].Mean; v != nil {
		return fmtNum(*v)
	}
	return "—"
}
