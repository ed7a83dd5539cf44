package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/mbench/mbench/results"
)

// The parts of report.html drawn from the same findings as report.md's
// headline, capacity section and failure lists: what they say is the same,
// only the markup differs.

// htmlHead is the page's headline (report.md's "Result").
type htmlHead struct {
	Metric, Key, Baseline string
	Confidence            int
	Empty                 string // why there are no comparisons, when there are none
	Rows                  []htmlComparison
	AA, Results, Stop     string
	TooWide               string // the within-noise comparisons wider than the target ("" = none)
	AAFailed              bool
}

// htmlComparison is one comparison of a table, with the class that colours
// its change: up, down, noise or na.
type htmlComparison struct {
	Metric, Config, Baseline, Shape, Rate, Text, P, Class string
	N                                                     int
}

// htmlCapacity is a capacity search's section.
type htmlCapacity struct {
	Title, Err  string
	Unit        string // what the search varies: req/s, or in flight
	Confidence  int
	Searches    []capacitySearchRow
	Comparisons []htmlComparison
	Probes      []capacityProbeRow
}

// htmlErrors is the failed requests of every run by class.
type htmlErrors struct {
	Classes []string
	Rows    []htmlErrorRow
}

// htmlErrorRow is one run's failed requests, one count per class.
type htmlErrorRow struct {
	Cell, Config, Rate, Verdict string
	Block                       int
	Counts                      []int
}

// newHTMLHead is the headline of v for the page.
func newHTMLHead(v *reportView) htmlHead {
	h := v.headline
	out := htmlHead{Metric: h.Metric, Key: h.Key, Baseline: h.Baseline, Confidence: int(math.Round(100 * h.Confidence)),
		AA: plainText(h.AAText), AAFailed: h.AAFailed, TooWide: h.TooWide, Results: plainText(h.resultLine()), Stop: h.stopLine()}
	switch {
	case h.Baseline == "":
		out.Empty = "No baseline config named: nothing is compared."
	case len(h.Rows) == 0:
		out.Empty = "Only the baseline config (" + h.Baseline + ") ran: nothing to compare."
	}
	for _, r := range h.Rows {
		out.Rows = append(out.Rows, htmlComparisonOf(r))
	}
	return out
}

// htmlComparisonOf is a comparison row for the page.
func htmlComparisonOf(r results.ComparisonRow) htmlComparison {
	return htmlComparison{Metric: r.Metric, Config: r.Config, Baseline: r.Baseline, Shape: r.Shape, Rate: fmtFloat(r.Rate),
		Text: r.Text(), P: fmtP(r.PAdj, r.N), N: r.N, Class: changeClass(r.Comparison, r.Note)}
}

// changeClass is how a comparison is coloured: up or down when it is
// significant, noise when it is not, na without a comparison.
func changeClass(c results.Comparison, note string) string {
	switch {
	case note != "" || c.N < 2:
		return "na"
	case !c.Significant():
		return "noise"
	case c.Effect > 0:
		return "up"
	}
	return "down"
}

// newHTMLCapacity is a capacity search's section, nil for a fixed-rate
// sweep.
func newHTMLCapacity(v *reportView) *htmlCapacity {
	if !v.searched() {
		return nil
	}
	if v.capErr != nil {
		return &htmlCapacity{Title: "Capacity at the SLO", Err: fmt.Sprintf("%s could not be read: %v", results.CapacityFile, v.capErr)}
	}
	rep := v.capacity
	c := &htmlCapacity{Title: fmt.Sprintf("Capacity at the SLO (%s)", rep.Spec.BoundsText()), Unit: rep.Spec.Unit(),
		Confidence: int(math.Round(100 * rep.Spec.Confidence)), Searches: capacitySearchRows(rep), Probes: capacityProbeRows(rep)}
	for _, cc := range rep.Comparisons {
		c.Comparisons = append(c.Comparisons, htmlComparison{Config: cc.Config, Baseline: cc.Baseline, Shape: cc.Shape,
			Text: cc.Words(), P: fmtP(cc.P, cc.N), N: cc.N, Class: changeClass(cc.Comparison, cc.Note)})
	}
	return c
}

// newHTMLErrors is the failed-requests table of the page.
func newHTMLErrors(ordered []*results.Cell) htmlErrors {
	rows, classes := errorRows(ordered)
	out := htmlErrors{Classes: classes}
	for _, r := range rows {
		er := htmlErrorRow{Cell: r.cell.Info.ID, Config: r.cell.Info.Config, Rate: fmtFloat(r.cell.Info.Rate),
			Verdict: string(r.run.Ref.Status), Block: r.run.Ref.Block}
		for _, k := range classes {
			er.Counts = append(er.Counts, r.run.Sum.Errors[k])
		}
		out.Rows = append(out.Rows, er)
	}
	return out
}

// plainText drops report.md's inline markup (bold, code) from a line.
func plainText(s string) string {
	return strings.NewReplacer("**", "", "`", "").Replace(s)
}
