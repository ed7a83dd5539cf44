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

// SimulatedBanner heads every report of a sweep against the simulated engine.
const SimulatedBanner = "**SIMULATED ENGINE — numbers model an engine, not vLLM**"

// unaccountedLarge: an unaccounted share of step time above this is called
// out as an incomplete decomposition.
const unaccountedLarge = 0.10

// reportView is what every section of report.md reads: the analysis, its
// cells in table order, the comparisons the report shows (for a capacity
// search, those at rates both sides probed), the capacity search and the
// headline drawn from them.
type reportView struct {
	a        *results.Analysis
	s        *results.Sweep
	ordered  []*results.Cell
	shown    []results.ComparisonRow // the comparisons with the baseline the report shows
	dropped  int                     // comparisons a capacity search's report leaves out (no baseline probe at their rate)
	capacity *results.CapacityReport // capacity.json; nil for a fixed-rate sweep
	capErr   error                   // capacity.json exists but could not be read
	headline headline
}

// newReportView gathers what the sections share.
func newReportView(a *results.Analysis) *reportView {
	v := &reportView{a: a, s: &a.Sweep, ordered: a.Ordered, shown: a.Comparisons, capacity: a.Sweep.Capacity, capErr: a.Sweep.CapacityErr}
	if v.searched() {
		v.shown, v.dropped = probedComparisons(v.s, v.ordered, a.Comparisons)
	}
	v.headline = newHeadline(v)
	return v
}

// searched reports whether the sweep is a capacity search.
func (v *reportView) searched() bool { return v.capacity != nil || v.capErr != nil }

// mdSection is one section of report.md after the headline: it writes
// itself into b from v. A section that carries no information for this
// sweep (every request one class, no cache figures, nothing failed) writes
// one line saying so, never an empty table. A new section is a function of
// this type added to mdSections.
type mdSection func(b *strings.Builder, v *reportView)

// mdSections are report.md's sections after the headline, in order: the
// details of the headline first, then the absolute tables, what went wrong,
// the environment, the method and every run.
func mdSections(v *reportView) []mdSection {
	var out []mdSection
	if v.searched() {
		out = append(out, renderCapacityDetails, renderProbes)
	} else {
		out = append(out, renderComparisons, renderTTFT)
	}
	return append(out, renderSLO, renderOutputLengths, renderSteps, renderClasses, renderClassComparisons, renderClassFailures,
		renderPrefixCache, renderGPUUtil, renderNoise, renderBlocks, renderContention,
		renderClientLimited, renderVerdicts, renderProblems, renderEnv, renderMethod, renderRuns)
}

// renderReport writes report.md: the title, the headline, then every
// section of mdSections.
func renderReport(a *results.Analysis) string {
	s := &a.Sweep
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# mbench report: %s\n\n", cmp.Or(s.Name, "sweep"))
	if s.Simulated {
		p("%s\n\n", SimulatedBanner)
	}
	for _, o := range s.Overrides {
		p("**Analysed with an override at export**: %s.\n\n", o)
	}
	v := newReportView(a)
	renderHeadline(&b, v)
	for _, sec := range mdSections(v) {
		sec(&b, v)
	}
	return b.String()
}

// renderRuns lists every journaled run.
func renderRuns(b *strings.Builder, v *reportView) {
	b.WriteString("## Runs\n\n| Cell | Config | Shape | Rate | Block | Verdict | Dir |\n|---|---|---|---|---|---|---|\n")
	for _, c := range v.ordered {
		for _, r := range c.Runs {
			fmt.Fprintf(b, "| %s | %s | %s | %g | %d | %s | %s |\n", c.Info.ID, c.Info.Config, c.Info.Shape, c.Info.Rate, r.Ref.Block, r.Ref.Status, r.Ref.Dir)
		}
	}
	b.WriteString("\n")
}

// renderEnv writes the environment section.
func renderEnv(b *strings.Builder, v *reportView) {
	s := v.s
	b.WriteString("## Environment\n\n")
	engines := map[string]bool{}
	for _, c := range v.ordered {
		if c.Sum.Engine != "" {
			engines[engineLabel(c.Sum.Engine)] = true
		}
	}
	if len(s.Env) == 0 && len(engines) == 0 {
		b.WriteString("Not recorded.\n\n")
		return
	}
	b.WriteString("| Key | Value |\n|---|---|\n")
	if len(engines) > 0 {
		fmt.Fprintf(b, "| engine (from runs) | %s |\n", strings.Join(slices.Sorted(maps.Keys(engines)), ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		fmt.Fprintf(b, "| %s | %s |\n", mdCell(k), mdCell(s.Env[k]))
	}
	b.WriteString("\n")
}

// shapesOf returns the shapes in table order and, per shape, its rates.
func shapesOf(ordered []*results.Cell) (shapes []string, rates map[string][]float64) {
	rates = map[string][]float64{}
	for _, c := range ordered {
		sh := c.Info.Shape
		if _, ok := rates[sh]; !ok {
			shapes = append(shapes, sh)
		}
		rs := rates[sh]
		if len(rs) == 0 || rs[len(rs)-1] != c.Info.Rate {
			rates[sh] = append(rs, c.Info.Rate)
		}
	}
	return shapes, rates
}

// configsOf returns the configs of ordered cells in table order.
func configsOf(ordered []*results.Cell, s *results.Sweep) []string {
	seen := map[string]bool{}
	var out []string
	for _, want := range []bool{true, false} {
		for _, c := range ordered {
			if (c.Info.Config == s.Baseline) == want && !seen[c.Info.Config] {
				seen[c.Info.Config] = true
				out = append(out, c.Info.Config)
			}
		}
	}
	return out
}

// renderTTFT writes the "TTFT p90 Comparison" table with CIs.
func renderTTFT(b *strings.Builder, v *reportView) {
	s, ordered := v.s, v.ordered
	fmt.Fprintf(b, "## TTFT p90 Comparison\n\nMean over blocks of each run's p90 TTFT, ± the %.0f%% Student-t CI half-width.\n\n", 100*s.Confidence)
	shapes, rates := shapesOf(ordered)
	var notes []string
	for _, sh := range shapes {
		fmt.Fprintf(b, "### Shape %s\n\n| Config |", sh)
		for _, r := range rates[sh] {
			fmt.Fprintf(b, " rate=%g |", r)
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(rates[sh])) + "\n")
		uneven := map[float64]bool{}
		for _, r := range rates[sh] {
			if note := blockMismatch(ordered, configsOf(ordered, s), sh, r); note != "" {
				uneven[r] = true
				notes = append(notes, note)
			}
		}
		for _, cfg := range configsOf(ordered, s) {
			label := cfg
			if cfg == s.Baseline {
				label = "**" + cfg + "**"
			}
			fmt.Fprintf(b, "| %s |", label)
			for _, r := range rates[sh] {
				c := findCell(ordered, cfg, sh, r)
				text := ttftCell(c)
				if uneven[r] && c != nil && c.Sum.NRuns > 0 {
					text += "‡"
				}
				fmt.Fprintf(b, " %s |", text)
				if c != nil && c.Sum.SaturatedRuns > 0 {
					notes = append(notes, fmt.Sprintf("\\* %s at rate=%g (%s): saturated in %d of %d runs — %s.", cfg, r, sh, c.Sum.SaturatedRuns, len(c.Sum.Runs), firstReason(c, true)))
				}
				if c != nil && c.Sum.ClientLimitedRuns > 0 {
					notes = append(notes, fmt.Sprintf("† %s at rate=%g (%s): client-limited in %d of %d runs — %s.", cfg, r, sh, c.Sum.ClientLimitedRuns, len(c.Sum.Runs), firstReason(c, false)))
				}
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	for _, n := range notes {
		b.WriteString(n + "\n\n")
	}
}

// findCell returns the original (non-A/A) cell of config at shape and rate.
func findCell(ordered []*results.Cell, cfg, shape string, rate float64) *results.Cell {
	for _, c := range ordered {
		if c.Info.Config == cfg && c.Info.Shape == shape && c.Info.Rate == rate {
			return c
		}
	}
	return nil
}

// ttftCell formats a cell's TTFT p90 for the comparison table.
func ttftCell(c *results.Cell) string {
	if c == nil {
		return "—"
	}
	m, ok := c.Sum.Metrics[ttftP90]
	if !ok || m.Mean == nil {
		return "missing" + notResults(c)
	}
	var s string
	if m.HalfWidth == nil {
		s = fmt.Sprintf("%s ms (n=%d)", fmtNum(*m.Mean), m.N)
	} else {
		s = fmt.Sprintf("%s ms ±%s", fmtNum(*m.Mean), fmtNumLike(*m.HalfWidth, *m.Mean))
	}
	if c.Sum.SaturatedRuns > 0 {
		s += "*"
	}
	if c.Sum.ClientLimitedRuns > 0 {
		s += "†"
	}
	return s
}

// firstReason returns the first saturation (or client-limit) reason of a cell.
func firstReason(c *results.Cell, saturation bool) string {
	for _, r := range c.Sum.Runs {
		if saturation && r.Saturated {
			return fmt.Sprintf("b%d: %s", r.Block, cmp.Or(r.SaturationReason, "marked saturated"))
		}
		if !saturation && r.ClientLimited {
			return fmt.Sprintf("b%d: %s", r.Block, cmp.Or(r.ClientLimitedReason, "marked client-limited"))
		}
	}
	return "no reason recorded"
}

// fmtNum formats a measurement with 3 significant digits' worth of decimals.
func fmtNum(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmtNumLike(v, v)
}

// fmtNumLike formats v with the decimals fmtNum would use for ref.
func fmtNumLike(v, ref float64) string {
	switch a := math.Abs(ref); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// fmtPct formats a fraction as a percentage; "—" for nil.
func fmtPct(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

// fmtP formats a p-value.
func fmtP(p float64, n int) string {
	switch {
	case n < 2 || math.IsNaN(p):
		return "—"
	case p < 0.001:
		return "<0.001"
	default:
		return fmt.Sprintf("%.3f", p)
	}
}

// renderNoise writes the per-cell noise-floor table of the stopping metric.
func renderNoise(b *strings.Builder, v *reportView) {
	s, ordered := v.s, v.ordered
	key := s.Primary().Key
	def, _ := results.MetricOf(key)
	unit := map[results.Unit]string{results.UnitMs: "ms", results.UnitUs: "µs"}[def.Unit] // its registry unit where it is a time
	fmt.Fprintf(b, "## Noise floor (%s)\n\nPer cell, across blocks: CV of the per-run %s and the relative half-width of the %.0f%% CI of its mean (for context: the stopping rule targets the comparisons' CIs, see Method; only sweeps recorded before it show a per-cell target).\n\n", s.Metric, key, 100*s.Confidence)
	b.WriteString("| Config | Shape | Rate | n | mean | CV | rel. half-width | target |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range ordered {
		m, ok := c.Sum.Metrics[key]
		if !ok || m.Mean == nil {
			fmt.Fprintf(b, "| %s | %s | %g | 0 | missing | — | — | — |\n", c.Info.Config, c.Info.Shape, c.Info.Rate)
			continue
		}
		target := "—"
		if s.RelCI > 0 && s.Stage1 == 0 {
			met := "not met"
			if m.RelHalfWidth != nil && *m.RelHalfWidth <= s.RelCI {
				met = "met"
			}
			target = fmt.Sprintf("≤%.1f%% (%s)", 100*s.RelCI, met)
		}
		fmt.Fprintf(b, "| %s | %s | %g | %d | %s %s | %s | %s | %s |\n", c.Info.Config, c.Info.Shape, c.Info.Rate, m.N,
			fmtNum(*m.Mean), unit, fmtPct(m.CV), fmtPct(m.RelHalfWidth), target)
	}
	b.WriteString("\n")
}

// mdCell makes free text safe inside a Markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.Join(strings.Fields(s), " ")
}
