package report

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mbench/mbench/results"
)

// renderSLO writes the goodput section of report.md: per cell the SLO, the
// goodput and the SLO attainment with their CIs. It says so when the runs
// were held to different SLOs (a matrix edited between runs kept by
// `mbench run --out`), and collapses to one line when no run had an SLO.
func renderSLO(b *strings.Builder, v *reportView) {
	s, ordered := v.s, v.ordered
	if !results.AnyCellHas(ordered, results.MetricGoodput) {
		collapsed(b, "Goodput under an SLO", "no run was held to an SLO (slo: in the matrix, --slo of mbench load), so there is no goodput or SLO attainment.")
		return
	}
	fmt.Fprintf(b, "## Goodput under the SLO\n\n"+
		"Goodput (%s) is the rate of measured requests that completed and met every bound of the SLO, per second of the measured window, as `vllm bench serve --goodput` counts it "+
		"(TPOT = (E2EL − TTFT)/(output tokens − 1), taken as 0 for a one-token answer; a value equal to its bound meets it). "+
		"SLO attainment is the share of the measured requests, completed or failed by the engine, that met it. Goodput: mean over blocks ± the %.0f%% Student-t CI half-width; "+
		"SLO attainment: mean over blocks [its %.0f%% Wilson interval, on the number of requests that the spread between blocks implies, at most those counted].\n\n",
		results.MetricGoodput, 100*s.Confidence, 100*s.Confidence)
	b.WriteString("| Config | Shape | Rate | SLO | goodput (req/s) | SLO attainment | n |\n|---|---|---|---|---|---|---|\n")
	all := map[string]bool{}
	for _, c := range ordered {
		slos := cellSLOs(c)
		for _, x := range slos {
			all[x] = true
		}
		g, a := c.Sum.Metrics[results.MetricGoodput], c.Sum.Metrics[results.MetricSLOAttainment]
		fmt.Fprintf(b, "| %s | %s | %g | %s | %s | %s | %d |\n", c.Info.Config, c.Info.Shape, c.Info.Rate,
			cmp.Or(strings.Join(slos, "; "), "none"), meanCI(g, 1, ""), proportionCI(a), g.N)
	}
	b.WriteString("\n")
	if len(all) > 1 {
		fmt.Fprintf(b, "**Warning**: the runs were held to different SLOs (%s): their goodputs are not comparable. Re-run the cells whose runs kept an older SLO.\n\n",
			strings.Join(slices.Sorted(maps.Keys(all)), " | "))
	}
}

// cellSLOs lists the distinct SLOs of a cell's used runs, in words.
func cellSLOs(c *results.Cell) []string {
	seen := map[string]bool{}
	for _, r := range c.Used {
		if r.Sum != nil && r.Sum.SLO != nil {
			seen[r.Sum.SLO.String()] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// meanCI formats a cell metric as "mean ±half" scaled by k with a unit
// suffix, "x (n=1)" without a CI, "—" without a value.
func meanCI(m results.MetricStats, k float64, unit string) string {
	if m.Mean == nil {
		return "—"
	}
	mean := k * *m.Mean
	if m.HalfWidth == nil {
		return fmt.Sprintf("%s%s (n=%d)", fmtNum(mean), unit, m.N)
	}
	return fmt.Sprintf("%s%s ±%s", fmtNum(mean), unit, fmtNumLike(k**m.HalfWidth, mean))
}

// proportionCI formats a proportion's mean and CI in percent as
// "67.0% [45.2, 88.8]": a Wilson interval where the trials are known
// (MetricStats.Interval), else the Student-t interval clipped to [0, 100%]
// (a t-interval on a few runs' shares can leave it; a share cannot);
// "x% (n=1)" without one, "—" without a value.
func proportionCI(m results.MetricStats) string {
	if m.Mean == nil {
		return "—"
	}
	if m.CILo == nil || m.CIHi == nil || m.HalfWidth == nil {
		return fmt.Sprintf("%.1f%% (n=%d)", 100**m.Mean, m.N)
	}
	clip := func(x float64) float64 { return 100 * min(1, max(0, x)) }
	return fmt.Sprintf("%.1f%% [%.1f, %.1f]", 100**m.Mean, clip(*m.CILo), clip(*m.CIHi))
}
