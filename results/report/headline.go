package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/mbench/mbench/results"
)

// headline is what report.md and report.html open with: the primary
// metric's comparisons (each config against the baseline: a change with its
// CI, or within noise ±x), the A/A controls' verdict, what counts as a
// result in this sweep and how many runs were not, and why the sweep
// stopped. A capacity search's headline is its intervals and paired result
// instead of the per-rate comparisons.
type headline struct {
	Metric     string // the primary metric as the matrix names it (ttft_p90)
	Key        string // its RunMetrics key (p90_ttft_ms)
	Baseline   string
	Confidence float64
	Rows       []results.ComparisonRow // the primary metric's comparisons with the baseline
	AA         []results.ComparisonRow // the primary metric's A/A rows
	AAText     string                  // the A/A controls' verdict in words
	AAFailed   bool                    // some A/A control differs from its original
	TooWide    string                  // the within-noise comparisons wider than the target, in words ("" = none)
	Runs       int                     // runs journaled
	Results    int                     // runs that are results (verdict ok, summary read)
	NotResults results.VerdictCounts   // the other runs by verdict ("ok" here: an ok run whose summary could not be read)
	Missing    []string                // cells without a single usable run
	Stop       string
	Capacity   *results.CapacityReport // a capacity search's result; nil for a fixed-rate sweep
}

// newHeadline gathers the headline of a sweep from the export's findings.
func newHeadline(v *reportView) headline {
	s := v.s
	h := headline{Metric: s.Metric, Key: s.Primary().Key, Baseline: s.Baseline, Confidence: s.Confidence,
		NotResults: results.VerdictCounts{}, Stop: s.StopReason, Capacity: v.capacity}
	for _, r := range v.shown {
		if r.Primary {
			h.Rows = append(h.Rows, r)
		}
	}
	for _, r := range v.a.NoiseFloor {
		if r.Primary {
			h.AA = append(h.AA, r)
		}
	}
	h.AAText, h.AAFailed = aaVerdict(h.AA, h.Metric, s.RelCI)
	h.TooWide = tooWide(h.Rows, s.RelCI)
	for _, c := range v.ordered {
		for _, r := range c.Runs {
			h.Runs++
			if r.IsResult() {
				h.Results++
			} else {
				h.NotResults[r.Ref.Status]++
			}
		}
		if m := fmt.Sprintf("%s at rate=%g (%s)", c.Info.Config, c.Info.Rate, c.Info.Shape); c.Sum.NRuns == 0 && !slices.Contains(h.Missing, m) {
			h.Missing = append(h.Missing, m) // once: a capacity probe's re-runs are cells of their own
		}
	}
	return h
}

// aaVerdict says in words what the A/A controls found on the primary
// metric, and whether any of them differs from its original. The noise
// floor holds only when every compared control is within noise and its CI
// within the target half-width (repeat.rel_ci, a fraction; 0 = none):
// a wider interval measures no floor, and says how large an effect it
// leaves unseen.
func aaVerdict(rows []results.ComparisonRow, metric string, target float64) (string, bool) {
	if len(rows) == 0 {
		return "no A/A control in this sweep: the noise floor is measured only by each comparison's own CI (declare one, e.g. `plain_aa: {same_as: plain}`)", false
	}
	var bad, untested []string
	widest := 0.0
	for _, r := range rows {
		where := fmt.Sprintf("%s vs %s at rate=%g (%s)", r.Config, r.Baseline, r.Rate, r.Shape)
		switch {
		case r.Note != "" || r.N < 2:
			untested = append(untested, where+": "+r.Text())
		case r.Significant():
			bad = append(bad, where+": "+r.Text())
		default:
			widest = max(widest, r.HalfWidthPct())
		}
	}
	switch {
	case len(bad) > 0:
		return fmt.Sprintf("**an A/A control differs from its original on %s** (%s): the comparisons are not trustworthy until this is explained (ordering, warm-up, thermal state)", metric, strings.Join(bad, "; ")), true
	case len(untested) == len(rows):
		return "the A/A controls could not be compared (" + strings.Join(untested, "; ") + "): the noise floor is not measured", false
	}
	compared := fmt.Sprintf("%d of %d within noise on %s", len(rows)-len(untested), len(rows), metric)
	var text string
	switch {
	case target > 0 && widest <= 100*target:
		text = fmt.Sprintf("no A/A control differs from its original on %s (%d of %d within noise, CI half-widths up to ±%.1f%%, within the ±%.1f%% target): the noise floor holds", metric, len(rows)-len(untested), len(rows), widest, 100*target)
	case target > 0:
		text = fmt.Sprintf("the A/A control is too wide (±%s) to measure the noise floor: effects below ±%s cannot be told from noise (%s; the target, repeat.rel_ci, is ±%.1f%%)", results.Pct(widest), results.Pct(widest), compared, 100*target)
	default:
		text = fmt.Sprintf("no A/A control differs from its original (%s), and with no target (repeat.rel_ci) to hold it to, the floor is what it measured: effects below ±%s cannot be told from noise", compared, results.Pct(widest))
	}
	if len(untested) > 0 {
		text += "; not compared: " + strings.Join(untested, "; ")
	}
	return text, false
}

// tooWide names the within-noise comparisons whose CI is wider than the
// target half-width (a fraction; 0 = none): "within noise" there rules out
// only effects beyond the half-width.
func tooWide(rows []results.ComparisonRow, target float64) string {
	if target <= 0 {
		return ""
	}
	var wide []string
	for _, r := range rows {
		if r.Note != "" || r.N < 2 || r.Significant() || r.HalfWidthPct() <= 100*target {
			continue
		}
		wide = append(wide, fmt.Sprintf("%s at rate=%g (%s): ±%s (it could detect ±%s)", r.Config, r.Rate, r.Shape, results.Pct(r.HalfWidthPct()), results.Pct(r.DetectablePct())))
	}
	if len(wide) == 0 {
		return ""
	}
	return fmt.Sprintf("%s wider than the ±%.1f%% target: effects below the half-width cannot be told from noise there", strings.Join(wide, "; "), 100*target)
}

// resultLine is "what counts as a result" with this sweep's counts.
func (h headline) resultLine() string {
	text := fmt.Sprintf("only runs with verdict ok count (the rule is under Method): %d of %d runs are results", h.Results, h.Runs)
	if n := h.NotResults.Total(); n > 0 {
		parts := []string{}
		for _, vd := range results.Verdicts {
			if k := h.NotResults[vd]; k > 0 {
				if vd == results.VerdictOK {
					parts = append(parts, fmt.Sprintf("%d ok but unreadable", k))
				} else {
					parts = append(parts, fmt.Sprintf("%d %s", k, vd))
				}
			}
		}
		text += fmt.Sprintf("; %d are not (%s), listed under \"Runs that are not results\"", n, strings.Join(parts, ", "))
	}
	if len(h.Missing) > 0 {
		text += fmt.Sprintf("; %d cells have no usable run: %s", len(h.Missing), strings.Join(h.Missing, ", "))
	}
	return text
}

// stopLine is why the sweep stopped, or that it has not.
func (h headline) stopLine() string {
	return cmp.Or(h.Stop, "the sweep has not finished: this export is partial")
}

// renderHeadline writes report.md's opening section.
func renderHeadline(b *strings.Builder, v *reportView) {
	h := v.headline
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	if v.searched() {
		renderCapacityHeadline(b, v)
	} else {
		p("## Result\n\n")
		switch {
		case h.Baseline == "":
			p("No baseline config named: nothing is compared. The absolute tables below are the result.\n\n")
		case len(h.Rows) == 0:
			p("Only the baseline config (%s) ran: nothing to compare. The absolute tables below are the result.\n\n", h.Baseline)
		default:
			p("**%s** (%s, the primary metric) of each config against **%s**, paired by block: the change with its %.0f%% CI where the Holm-corrected test finds one, else \"within noise (±half-width; could detect ±d)\", d the change it would have found 4 times in 5.\n\n",
				h.Metric, h.Key, h.Baseline, 100*h.Confidence)
			p("| Config | Shape | Rate | %s vs %s | p (Holm) | Blocks |\n|---|---|---|---|---|---|\n", h.Metric, h.Baseline)
			for _, r := range h.Rows {
				p("| %s | %s | %g | %s | %s | %d |\n", r.Config, r.Shape, r.Rate, r.Text(), fmtP(r.PAdj, r.N), r.N)
			}
			p("\n")
		}
	}
	if h.TooWide != "" {
		p("- **Within noise, but too wide to tell**: %s.\n", h.TooWide)
	}
	p("- **A/A controls**: %s.\n", h.AAText)
	p("- **What counts as a result**: %s.\n", h.resultLine())
	p("- **Why the sweep stopped**: %s.\n\n", strings.TrimSuffix(h.stopLine(), "."))
}

// collapsed writes a section that carries no information for this sweep as
// one line: its title in bold and why there is nothing to show.
func collapsed(b *strings.Builder, title, format string, args ...any) {
	fmt.Fprintf(b, "**%s**: %s\n\n", title, fmt.Sprintf(format, args...))
}
