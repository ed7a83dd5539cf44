package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
)

// hasMetric reports whether a cell has a mean for metric k.
func hasMetric(m map[string]results.MetricStats, k string) bool {
	return m[k].Mean != nil
}

// appendOnce appends s to list unless it is already there.
func appendOnce(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// renderComparisons writes the comparison tables of every compared metric
// (the primary one first, as in the headline, with the Mann–Whitney p) and
// the A/A table.
func renderComparisons(b *strings.Builder, v *reportView) {
	s := v.s
	fmt.Fprintf(b, "## Comparisons with %s\n\n", cmp.Or(s.Baseline, "the baseline"))
	switch {
	case s.Baseline == "":
		b.WriteString("No baseline config named: no comparisons.\n\n")
	case len(v.shown) == 0:
		b.WriteString("Only the baseline config ran: nothing to compare.\n\n")
	default:
		for i, m := range s.ComparedMetrics() {
			role := "secondary"
			if i == 0 {
				role = "primary"
			}
			fmt.Fprintf(b, "### %s (%s) — %s\n\n| Config | Shape | Rate | Change vs %s | p (Holm) | p (Mann–Whitney) | Blocks |\n|---|---|---|---|---|---|---|\n", m.Name, m.Key, role, s.Baseline)
			for _, r := range v.shown {
				if r.Metric == m.Name {
					fmt.Fprintf(b, "| %s | %s | %g | %s | %s | %s | %d |\n", r.Config, r.Shape, r.Rate, r.Text(), fmtP(r.PAdj, r.N), fmtP(r.PMW, r.N), r.N)
				}
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("## A/A noise floor\n\n")
	if len(v.a.NoiseFloor) == 0 {
		b.WriteString("No A/A control in this sweep. Declare one (for example `plain_aa: {same_as: plain}`) to measure the noise floor of the comparisons directly.\n\n")
		return
	}
	b.WriteString("An A/A control runs the same config as its original under another name, so any difference between the two is noise: these rows are the measured noise floor of the comparisons above (same method; on the primary metric they are in the same Holm family as the comparisons, on secondary metrics Holm-corrected within each metric).\n\n")
	b.WriteString("| A/A config | Same as | Shape | Rate | Metric | Difference | p (Holm) | Blocks |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range v.a.NoiseFloor {
		metric := r.Metric + " (secondary)"
		if r.Primary {
			metric = r.Metric + " (primary)"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %g | %s | %s | %s | %d |\n", r.Config, r.Baseline, r.Shape, r.Rate, metric, r.Text(), fmtP(r.PAdj, r.N), r.N)
	}
	b.WriteString("\n")
	for _, r := range v.a.NoiseFloor {
		if r.Significant() {
			fmt.Fprintf(b, "**Warning**: the A/A control %s differs from %s in %s at rate=%g (%s); the comparisons above are not trustworthy until this is explained (ordering, warm-up, thermal state).\n\n", r.Config, r.Baseline, r.Metric, r.Rate, r.Shape)
		}
	}
}

// renderClientLimited says in words which runs the load generator could not
// drive at their schedule.
func renderClientLimited(b *strings.Builder, v *reportView) {
	n, notResults := 0, 0
	for _, c := range v.ordered {
		for _, r := range c.Sum.Runs {
			switch {
			case r.Used && r.ClientLimited:
				n++
			case !r.Used && (r.ClientLimited || r.Status == results.VerdictClientLimited):
				notResults++
			}
		}
	}
	if n == 0 && notResults > 0 {
		// Those runs were graded out: the load generator did fall behind,
		// so "kept to its schedule" would be false.
		runs := fmt.Sprintf("%d runs in which the load generator fell behind its schedule are not results", notResults)
		if notResults == 1 {
			runs = "1 run in which the load generator fell behind its schedule is not a result"
		}
		collapsed(b, "Client-limited runs", "none among the results; %s (listed under *Runs that are not results*).", runs)
		return
	}
	if n == 0 {
		collapsed(b, "Client-limited runs", "none: in every run the load generator kept to its schedule (no more than %.0f%% of sends over %.0f ms late, ≥ %.2f of the requests sent within the schedule's window and, for Poisson and gamma arrivals, the KS distance of the sent gaps within %.2f of its critical value at α = %.2g).",
			100*openloop.ClientLateShare, openloop.ClientLateMs, openloop.ClientLimitedRatio, openloop.ClientLimitedKSMaxD, openloop.ClientLimitedKSAlpha)
		return
	}
	b.WriteString("## Client-limited runs\n\n")
	for _, c := range v.ordered {
		for _, r := range c.Sum.Runs {
			if r.Used && r.ClientLimited {
				fmt.Fprintf(b, "- %s b%d (%s, rate=%g, %s): %s. Its latencies include time the request spent waiting in the client.\n", c.Info.ID, r.Block, c.Info.Config, c.Info.Rate, c.Info.Shape, cmp.Or(r.ClientLimitedReason, "marked client-limited"))
			}
		}
	}
	b.WriteString("\n")
}

// renderProblems lists missing cells, missing blocks, failed runs and
// warnings.
func renderProblems(b *strings.Builder, v *reportView) {
	lines := problemLines(v)
	if len(lines) == 0 {
		collapsed(b, "Runs that are not results, and missing cells", "none: every cell has a usable run in every block.")
		return
	}
	b.WriteString("## Runs that are not results, and missing cells\n\n")
	for _, l := range lines {
		b.WriteString("- " + l.Text)
		if l.Timeline != "" {
			b.WriteString(" ([timeline](" + l.Timeline + "))")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// problemLine is one line of the report's problems: its text (markdown)
// and, for a run that is not a result, the path of its timeline.
type problemLine struct {
	Text     string
	Timeline string // timelineLink: relative to the sweep directory, "" without one
}

// problemLines are the missing cells and blocks, every run that is not a
// result with its reason and timeline, and the export's warnings, one line
// each.
func problemLines(v *reportView) []problemLine {
	var lines []problemLine
	for _, c := range v.ordered {
		id := fmt.Sprintf("%s (%s, rate=%g, %s)", c.Info.ID, c.Info.Config, c.Info.Rate, c.Info.Shape)
		switch {
		case c.Sum.NRuns == 0:
			lines = append(lines, problemLine{Text: fmt.Sprintf("cell %s: **missing** — no usable run", id)})
		case len(c.Sum.MissingBlocks) > 0:
			bs := make([]string, len(c.Sum.MissingBlocks))
			for i, x := range c.Sum.MissingBlocks {
				bs[i] = fmt.Sprint(x)
			}
			lines = append(lines, problemLine{Text: fmt.Sprintf("cell %s: no usable run in block %s", id, strings.Join(bs, ", "))})
		}
		for _, r := range c.Runs {
			if !r.IsResult() {
				lines = append(lines, problemLine{Text: fmt.Sprintf("run %s b%d: **%s** — %s", c.Info.ID, r.Ref.Block, r.Ref.Status, cmp.Or(r.Ref.Reason, r.Problem, "no reason recorded")),
					Timeline: timelineLink(c, r)})
			}
		}
	}
	for _, w := range v.a.Warnings {
		lines = append(lines, problemLine{Text: w})
	}
	return lines
}
