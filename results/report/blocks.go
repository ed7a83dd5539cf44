package report

import (
	"fmt"
	"strings"

	"github.com/mbench/mbench/results"
)

// blockFigure is one table of report.md's per-block section: its title
// and how a run summary gives its value.
type blockFigure struct {
	title string
	value func(*results.RunSummary) (float64, bool)
}

// blockFigures are the per-block figures report.md lists for every
// config: the primary metric, the client's median time per output token,
// and the engine's own per-token time where it says it: its median step
// time where its step log has one, its /metrics token-time counters over
// the window where it exports them (prefix_cache.engine_token_ms). Both
// move when the engine slows down, whatever the client sees.
func blockFigures(s *results.Sweep) []blockFigure {
	ms := []results.Named{s.Primary()}
	for _, name := range results.BlockMetrics {
		if m := results.Lookup(name); m.Key != ms[0].Key {
			ms = append(ms, m)
		}
	}
	var out []blockFigure
	for _, m := range ms {
		out = append(out, blockFigure{fmt.Sprintf("%s (%s)", m.Name, m.Key), func(r *results.RunSummary) (float64, bool) { return results.RunMetric(r, m.Key) }})
	}
	return append(out, blockFigure{"engine_token_ms (the engine's own time per output token, from its /metrics)", func(r *results.RunSummary) (float64, bool) {
		if r == nil || r.PrefixCache == nil || r.PrefixCache.EngineTokenMs == nil {
			return 0, false
		}
		return *r.PrefixCache.EngineTokenMs, true
	}})
}

// renderBlocks writes each block's figures per config, so that a drift
// across the sweep (an engine or a host that slows down between blocks) is
// seen with its size: one table per metric, a row per cell, a column per
// block, and the largest over the smallest of the row. A run that is not a
// result shows its verdict instead of a value.
func renderBlocks(b *strings.Builder, v *reportView) {
	maxBlock := 0
	for _, c := range v.ordered {
		for _, r := range c.Runs {
			maxBlock = max(maxBlock, r.Ref.Block)
		}
	}
	if maxBlock == 0 {
		return
	}
	var tables []string
	for _, fig := range blockFigures(v.s) {
		var rows []string
		for _, c := range v.ordered {
			vals := make([]string, maxBlock)
			lo, hi, seen := 0.0, 0.0, false
			for _, r := range c.Runs {
				cell := string(r.Ref.Status)
				if x, ok := fig.value(r.Sum); ok && r.Ref.Status.Usable() {
					cell = fmt.Sprintf("%.4g", x)
					if !seen || x < lo {
						lo = x
					}
					hi = max(hi, x)
					seen = true
				} else if r.Sum != nil && r.Ref.Status.Usable() {
					cell = "—"
				}
				if r.Ref.Block >= 1 {
					vals[r.Ref.Block-1] = cell // the last attempt of a block wins, as in the tables
				}
			}
			if !seen {
				continue
			}
			spread := "—"
			if lo > 0 {
				spread = fmt.Sprintf("%.3f", hi/lo)
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %g | %s | %s |", c.Info.Config, c.Info.Shape, c.Info.Rate, strings.Join(vals, " | "), spread))
		}
		if len(rows) == 0 {
			continue
		}
		var t strings.Builder
		fmt.Fprintf(&t, "### %s\n\n| Config | Shape | Rate |", fig.title)
		for k := 1; k <= maxBlock; k++ {
			fmt.Fprintf(&t, " b%d |", k)
		}
		t.WriteString(" max/min |\n|---|---|---|" + strings.Repeat("---|", maxBlock) + "---|\n")
		t.WriteString(strings.Join(rows, "\n") + "\n\n")
		tables = append(tables, t.String())
	}
	if len(tables) == 0 {
		return
	}
	b.WriteString("## Per block\n\nEach block's figure per config (runs that are not results show their verdict), and the largest over the smallest of each row: a drift across the sweep shows here with its size, whatever the paired comparisons cancel.\n\n")
	b.WriteString(strings.Join(tables, ""))
}
