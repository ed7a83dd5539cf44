package results

import (
	"fmt"
	"strings"
)

// renderClasses writes the request-class table (seed 003 §3.5) from the
// cells' means over runs. Cells without the figures are left out; a sweep
// with none, or whose every request is of one class, gets one line.
func renderClasses(b *strings.Builder, v *reportView) {
	ordered := v.ordered
	if !anyCellHas(ordered, "class_warm_share") {
		collapsed(b, "Request classes", "no run has per-class figures.")
		return
	}
	bd := classBoundsOf(ordered)
	if only, ok := singleClass(ordered); ok {
		collapsed(b, "Request classes", "every measured request of every cell is %s (by new prompt tokens; WARM < %d, MEDIUM < %d, HEAVY < %d, HEAVY+ above): one class, whose figures are the cells' own.", only, bd[0], bd[1], bd[2])
		return
	}
	b.WriteString("## Request classes\n\n")
	fmt.Fprintf(b, "By new (uncached) prompt tokens: the router's estimate where a router logged one (routing.jsonl), else the whole prompt. "+
		"WARM < %d, MEDIUM < %d, HEAVY < %d, HEAVY+ above. Means over runs, in ms.\n\n", bd[0], bd[1], bd[2])
	b.WriteString("| Config | Shape | Rate | Class | Share | TTFT p50 | TTFT p90 | TPOT p90 | E2EL p50 |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range ordered {
		m := c.Sum.Metrics
		for _, n := range ClassNames {
			p := "class_" + classKey(n) + "_"
			share, ok := m[p+"share"]
			if !ok || share.Mean == nil || *share.Mean == 0 {
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %g | %s | %s | %s | %s | %s | %s |\n", c.Info.Config, c.Info.Shape, c.Info.Rate, n,
				fmtPct(share.Mean), meanOrDash(m, p+"median_ttft_ms"), meanOrDash(m, p+"p90_ttft_ms"),
				meanOrDash(m, p+"p90_tpot_ms"), meanOrDash(m, p+"median_e2el_ms"))
		}
	}
	b.WriteString("\n")
}

// singleClass reports the one class every cell with class figures falls
// in entirely (every run's share of it is 1), when there is one.
func singleClass(ordered []*cellData) (string, bool) {
	only := ""
	for _, c := range ordered {
		for _, n := range ClassNames {
			share, ok := c.Sum.Metrics["class_"+classKey(n)+"_share"]
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

// renderPrefixCache writes the prefix cache per instance (seed 003 §3.2);
// one line when no run has /metrics figures or every hit rate is zero.
func renderPrefixCache(b *strings.Builder, v *reportView) {
	ordered := v.ordered
	if !anyCellHas(ordered, "prefix_cache_hit_rate") {
		collapsed(b, "Prefix cache by instance", "no run has prefix-cache figures from /metrics.")
		return
	}
	if allZero(ordered, "prefix_cache_hit_rate", "prefix_cache_hit_rate_max_inst", "external_hit_rate_mean_inst") {
		collapsed(b, "Prefix cache by instance", "the hit rate is 0.0%% in every run of every cell and on every instance (engine cache and any KV connector's): no measured prompt reused a cached prefix.")
		return
	}
	b.WriteString("## Prefix cache by instance\n\n")
	b.WriteString("Hit rates from each instance's /metrics deltas over the measured window (prefix = the engine's own cache, external = a KV connector's). " +
		"Pooled = all instances' hits over all their queries; mean, std (population) and range are across instances. Means over runs.\n\n")
	b.WriteString("| Config | Shape | Rate | Pooled | Mean | Std | Min | Max | External mean | External std |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range ordered {
		m := c.Sum.Metrics
		pct := func(k string) string {
			if v, ok := m[k]; ok && v.Mean != nil {
				return fmtPct(v.Mean)
			}
			return "—"
		}
		pp := func(k string) string {
			if v, ok := m[k]; ok && v.Mean != nil {
				return fmt.Sprintf("%.1f pp", 100**v.Mean)
			}
			return "—"
		}
		fmt.Fprintf(b, "| %s | %s | %g | %s | %s | %s | %s | %s | %s | %s |\n", c.Info.Config, c.Info.Shape, c.Info.Rate,
			pct("prefix_cache_hit_rate"), pct("prefix_cache_hit_rate_mean_inst"), pp("prefix_cache_hit_rate_std_inst"),
			pct("prefix_cache_hit_rate_min_inst"), pct("prefix_cache_hit_rate_max_inst"),
			pct("external_hit_rate_mean_inst"), pp("external_hit_rate_std_inst"))
	}
	b.WriteString("\n")
}

// classBoundsOf returns the class bounds the runs used (the first run that
// recorded them), else the defaults.
func classBoundsOf(ordered []*cellData) [3]int {
	for _, c := range ordered {
		for _, r := range c.Runs {
			if r.Sum != nil && r.Sum.Classes != nil {
				return r.Sum.Classes.Bounds
			}
		}
	}
	return DefaultClassBounds
}

// allZero reports whether every run of every cell has each of keys zero
// or absent.
func allZero(ordered []*cellData, keys ...string) bool {
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
func meanOrDash(m map[string]MetricStats, k string) string {
	if v, ok := m[k]; ok && v.Mean != nil {
		return fmtNum(*v.Mean)
	}
	return "—"
}
