package results

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// SimulatedBanner heads every report of a sweep against the simulated engine.
const SimulatedBanner = "**SIMULATED ENGINE — numbers model an engine, not vLLM**"

// unaccountedLarge: an unaccounted share of step time above this is called
// out as an incomplete decomposition.
const unaccountedLarge = 0.10

// renderReport writes report.md.
func renderReport(s *ExportInput, cells []*cellData, rep *Report) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	name := s.Name
	if name == "" {
		name = "sweep"
	}
	p("# mbench report: %s\n\n", name)
	if s.Simulated {
		p("%s\n\n", SimulatedBanner)
	}
	for _, o := range s.Overrides {
		p("**Analysed with an override at export**: %s.\n\n", o)
	}
	ordered := cellOrder(s, cells)
	search := renderCapacity(&b, s.Dir) // a capacity search leads with its section (capacity_report.go)
	renderEnv(&b, s, cells)
	p("## Why the sweep stopped\n\n")
	if s.StopReason != "" {
		p("%s\n\n", s.StopReason)
	} else {
		p("No stop reason recorded: the sweep has not finished, and this export is partial.\n\n")
	}
	if search {
		rep = renderProbes(&b, s, ordered, rep) // per-probe tables, compact, and comparisons where both probed
	} else {
		renderTTFT(&b, s, ordered)
	}
	renderSLO(&b, s, ordered)
	renderSteps(&b, ordered)
	renderClasses(&b, ordered)
	renderNoise(&b, s, ordered)
	renderComparisons(&b, s, rep)
	renderClientLimited(&b, ordered)
	renderVerdicts(&b, ordered)
	renderProblems(&b, ordered, rep)
	p("## Runs\n\n| Cell | Config | Shape | Rate | Block | Verdict | Dir |\n|---|---|---|---|---|---|---|\n")
	for _, c := range ordered {
		for _, r := range c.Runs {
			p("| %s | %s | %s | %g | %d | %s | %s |\n", c.Info.ID, c.Info.Config, c.Info.Shape, c.Info.Rate, r.Ref.Block, r.Ref.Status, r.Ref.Dir)
		}
	}
	return b.String()
}

// renderEnv writes the environment section.
func renderEnv(b *strings.Builder, s *ExportInput, cells []*cellData) {
	b.WriteString("## Environment\n\n")
	engines := map[string]bool{}
	for _, c := range cells {
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
func shapesOf(ordered []*cellData) (shapes []string, rates map[string][]float64) {
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
func configsOf(ordered []*cellData, s *ExportInput) []string {
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

// renderTTFT writes the seed-000 "TTFT p90 Comparison" table with CIs.
func renderTTFT(b *strings.Builder, s *ExportInput, ordered []*cellData) {
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
					notes = append(notes, fmt.Sprintf("\\* %s at rate=%g (%s): saturated in %d of %d runs — %s.", cfg, r, sh, c.Sum.SaturatedRuns, c.Sum.NRuns, firstReason(c, true)))
				}
				if c != nil && c.Sum.ClientLimitedRuns > 0 {
					notes = append(notes, fmt.Sprintf("† %s at rate=%g (%s): client-limited in %d of %d runs — %s.", cfg, r, sh, c.Sum.ClientLimitedRuns, c.Sum.NRuns, firstReason(c, false)))
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
func findCell(ordered []*cellData, cfg, shape string, rate float64) *cellData {
	for _, c := range ordered {
		if c.Info.Config == cfg && c.Info.Shape == shape && c.Info.Rate == rate {
			return c
		}
	}
	return nil
}

// ttftCell formats a cell's TTFT p90 for the comparison table.
func ttftCell(c *cellData) string {
	if c == nil {
		return "—"
	}
	m, ok := c.Sum.Metrics["p90_ttft_ms"]
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
func firstReason(c *cellData, saturation bool) string {
	for _, r := range c.Sum.Runs {
		if saturation && r.Used && r.Saturated {
			return fmt.Sprintf("b%d: %s", r.Block, orDefault(r.SaturationReason, "marked saturated"))
		}
		if !saturation && r.Used && r.ClientLimited {
			return fmt.Sprintf("b%d: %s", r.Block, orDefault(r.ClientLimitedReason, "marked client-limited"))
		}
	}
	return "no reason recorded"
}

// orDefault returns s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
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
func renderNoise(b *strings.Builder, s *ExportInput, ordered []*cellData) {
	key := ResolveMetric(s.Metric)
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
			fmtNum(*m.Mean), metricUnit(key), fmtPct(m.CV), fmtPct(m.RelHalfWidth), target)
	}
	b.WriteString("\n")
}

// mdCell makes free text safe inside a Markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.Join(strings.Fields(s), " ")
}
