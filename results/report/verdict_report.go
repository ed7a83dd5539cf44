package report

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
)

// VerdictRule is the rule of Decide in words, for report.md's method.
const VerdictRule = "Each run gets one verdict, decided in one place from its summary: " +
	"**failed** when the engine or the harness failed (no summary); " +
	"**errors** when more of its measured requests failed than measure.max_error_rate allows (default 1%; " +
	"requests cut off by the drain timeout or an interrupt are not engine errors); " +
	"**saturated** when thr_ratio, the share of the measured requests the engine did not fail that completed " +
	"(whenever they ended: the rest were still in flight when the drain timeout or a stop cut them off), is below 0.9 " +
	"(judged only when at least 10 such requests were sent), the run was aborted by abort_if, or TTFT rose through the window " +
	"(a significant slope, and the last quarter's median TTFT above the first quarter's by half the median); " +
	"**incomplete** when fewer than measure.min_completed measured requests completed (the reason says when sending stopped; " +
	"a run the failures themselves cut short is errors only); " +
	"**short_outputs** when, with fixed lengths asked, the engine ended outputs before the tokens asked for (unless measure.allow_short_outputs); " +
	"**client_limited** when the load generator did not send on schedule; " +
	"**gpu_contended** when a process other than the engine used one of the run's GPUs during the window; " +
	"**throttled** when a GPU was power or thermally throttled for more of the window than allowed; " +
	"else **ok**. The first that applies is the verdict; every one that applied is recorded. " +
	"A request counts as completed when its stream ended with [DONE] and the engine produced something — a chunk with choices and " +
	"a content token, a usage of at least one token, or a finish reason (else empty_stream) — " +
	"with a usage no lower than the content chunks and no higher than max_tokens (else usage_mismatch); " +
	"requests with no usage chunk are counted per run, not failed. " +
	"Only ok runs count in the tables, the comparisons and the stopping rule."

// renderVerdicts writes the verdict section: counts, and the failed
// requests of every run by class; one line when every run is ok and no
// measured request failed.
func renderVerdicts(b *strings.Builder, v *reportView) {
	counts := results.VerdictCounts{}
	for _, c := range v.ordered {
		for _, r := range c.Runs {
			counts[r.Ref.Status]++
		}
	}
	rows, classes := errorRows(v.ordered)
	marks, drifts := runMarks(v.ordered)
	if len(rows) == 0 && len(marks) == 0 && len(drifts) == 0 && len(v.s.Superseded) == 0 && counts[results.VerdictOK] == counts.Total() {
		collapsed(b, "Run verdicts", "%d runs: %s; no measured request failed.", counts.Total(), counts)
		return
	}
	b.WriteString("## Run verdicts\n\n")
	fmt.Fprintf(b, "%d runs: %s. (The rule is in the Method section.)\n\n", counts.Total(), counts)
	if len(marks) > 0 {
		b.WriteString("### Token counts the streams did not vouch for\n\n" + strings.Join(marks, "\n") + "\n\n")
	}
	if len(drifts) > 0 {
		b.WriteString("### The engine slowed down (not saturation)\n\n" + strings.Join(drifts, "\n") + "\n\n")
	}
	renderSuperseded(b, v.s)
	if len(rows) == 0 {
		b.WriteString("No measured request failed.\n\n")
		return
	}
	b.WriteString("### Failed requests by class\n\n| Cell | Config | Rate | Block | Verdict |")
	for _, k := range classes {
		fmt.Fprintf(b, " %s |", k)
	}
	b.WriteString("\n|---|---|---|---|---|" + strings.Repeat("---|", len(classes)) + "\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %g | %d | %s |", r.cell.Info.ID, r.cell.Info.Config, r.cell.Info.Rate, r.run.Ref.Block, r.run.Ref.Status)
		for _, k := range classes {
			fmt.Fprintf(b, " %d |", r.run.Sum.Errors[k])
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// errorRow is a run with failed measured requests.
type errorRow struct {
	cell *results.Cell
	run  *results.Run
}

// errorRows lists the runs with failed measured requests, in table order,
// and the error classes present among them.
func errorRows(ordered []*results.Cell) ([]errorRow, []string) {
	byClass := map[string]int{}
	var rows []errorRow
	for _, c := range ordered {
		for _, r := range c.Runs {
			if r.Sum == nil || len(r.Sum.Errors) == 0 {
				continue
			}
			rows = append(rows, errorRow{c, r})
			for k, n := range r.Sum.Errors {
				byClass[k] += n
			}
		}
	}
	return rows, classOrder(byClass)
}

// classOrder is the classes present, in openloop.ErrorClasses order, then
// any unknown ones sorted.
func classOrder(m map[string]int) []string {
	var out []string
	for _, c := range openloop.ErrorClasses {
		if m[string(c)] > 0 {
			out = append(out, string(c))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !openloop.ErrorClass(k).Valid() {
			out = append(out, k)
		}
	}
	return out
}

// notResults is " (3 saturated)" for a cell whose runs are not results,
// "" when it has none.
func notResults(c *results.Cell) string {
	vc := results.VerdictCounts{}
	for _, r := range c.Runs {
		if !r.Ref.Status.Usable() {
			vc[r.Ref.Status]++
		}
	}
	if len(vc) == 0 {
		return ""
	}
	return " (" + vc.String() + ")"
}

// blockMismatch says, for the cells of configs at shape and rate, when their
// usable runs come from different blocks: their means are then over
// different blocks, while each comparison uses only the blocks both sides
// have. "" when every cell with a usable run has the same blocks.
func blockMismatch(ordered []*results.Cell, configs []string, shape string, rate float64) string {
	var parts []string
	var first string
	same := true
	for _, cfg := range configs {
		c := findCell(ordered, cfg, shape, rate)
		if c == nil || c.Sum.NRuns == 0 {
			continue
		}
		bs := slices.Sorted(maps.Keys(c.Used))
		txt := make([]string, len(bs))
		for i, x := range bs {
			txt[i] = fmt.Sprintf("b%d", x)
		}
		set := strings.Join(txt, ",")
		if first == "" {
			first = set
		} else if set != first {
			same = false
		}
		parts = append(parts, cfg+" "+set)
	}
	if same {
		return ""
	}
	return fmt.Sprintf("‡ rate=%g (%s): the configs' usable runs come from different blocks (%s); each mean is over its own blocks, and each comparison uses only the blocks both sides have.",
		rate, shape, strings.Join(parts, "; "))
}

// runMarks are the lines for the runs whose completed requests' token
// counts the streams did not vouch for (RunSummary.UsageMissing,
// ShortOutputs): what rests on the counts is said (short outputs make a
// run short_outputs unless the matrix allows them); and drifts, those for
// the runs whose TTFT rose through the window while the engine's own queue
// stayed empty (RunSummary.TTFTDriftMs): the engine slowed down, by how
// much.
func runMarks(ordered []*results.Cell) (lines, drifts []string) {
	for _, c := range ordered {
		for _, r := range c.Runs {
			if r.Sum == nil {
				continue
			}
			where := fmt.Sprintf("%s (%s rate=%g) b%d", c.Info.ID, c.Info.Config, c.Info.Rate, r.Ref.Block)
			if n := r.Sum.UsageMissing; n > 0 {
				lines = append(lines, fmt.Sprintf("- %s: %d of %d completed requests had no usage chunk; their output tokens are the content chunks counted (fewer where a chunk carries several tokens), and TPOT and output throughput rest on that count.",
					where, n, r.Sum.Completed))
			}
			if n := r.Sum.ShortOutputs; n > 0 {
				lines = append(lines, fmt.Sprintf("- %s: %d of %d completed requests got fewer output tokens than the max_tokens = min_tokens asked for (%s%s): the engine stopped early (a stop string, a slot's context; does it honour ignore_eos and min_tokens?), so the run measured shorter outputs than the shape says.",
					where, n, r.Sum.Completed, r.Sum.ShortOutputExample, finishNote(r.Sum.ShortOutputFinish)))
			}
			if d := r.Sum.TTFTDriftMs; d != nil {
				drifts = append(drifts, fmt.Sprintf("- %s: TTFT drifted +%.3g ms: %s.", where, *d, r.Sum.DriftReason))
			}
		}
	}
	return lines, drifts
}

// finishNote is "; finish reasons: 40 stop" for a short-output line, ""
// when the engine gave none.
func finishNote(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return "; finish reasons: " + strings.Join(parts, ", ")
}

// renderSuperseded says which runs were run again in place, and why: the
// load generator fell behind (client_limited), which says nothing of the
// engine. Only the last attempt counts.
func renderSuperseded(b *strings.Builder, s *results.Sweep) {
	if len(s.Superseded) == 0 {
		return
	}
	var parts []string
	for _, r := range s.Superseded {
		reason, _, _ := strings.Cut(strings.TrimSpace(r.Reason), "\n")
		parts = append(parts, fmt.Sprintf("%s b%d (%s)", r.Cell, r.Block, cmp.Or(reason, string(r.Status))))
	}
	fmt.Fprintf(b, "%d runs were run again in place, at the same position of the same block, and only their last attempt counts: %s.\n\n",
		len(parts), strings.Join(parts, "; "))
}
