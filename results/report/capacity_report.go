package report

import (
	"fmt"
	"math"
	"strings"

	"github.com/mbench/mbench/results"
)

// renderCapacityHeadline opens a capacity search's report.md: per config
// the capacity interval and the per-block estimate, and each config's
// capacity against the baseline's, paired by block.
func renderCapacityHeadline(b *strings.Builder, v *reportView) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	if v.capErr != nil {
		p("## Capacity at the SLO\n\n%s could not be read: %v\n\n", results.CapacityFile, v.capErr)
		return
	}
	rep := v.capacity
	sp := rep.Spec
	p("## Capacity at the SLO (%s)\n\n", sp.BoundsText())
	what := "offered rate"
	if sp.Over == "concurrency" {
		what = "number of requests kept in flight (a closed loop)"
	}
	holds := sp.BoundsText() + " holds" // "ttft_p90 ≤ 500 ms holds"
	if len(sp.Constraints()) > 1 {
		holds = "every bound holds"
	}
	p("The highest %s at which %s, per config (the probes and how they were judged are under \"The search\" below).\n\n", what, holds)
	p("| Config | Shape | Capacity interval (%s) | Uncertain band | Per-block estimate [%.0f%% CI] | Probes | Note |\n|---|---|---|---|---|---|---|\n", sp.Unit(), 100*sp.Confidence)
	for _, r := range capacitySearchRows(rep) {
		p("| %s | %s | %s | %s | %s | %d | %s |\n", r.Config, r.Shape, r.Interval, r.Band, r.Estimate, r.Probes, mdCell(r.Note))
	}
	p("\n")
	if len(rep.Comparisons) > 0 {
		p("Capacity against the baseline (%s), paired by block: per block the log ratio of the two configs' crossings of the limit, a %.0f%% t-CI on its mean; a crossing whose probe above the limit saturated is known only to lie between its two probes and enters as that whole bracket (interval-censored), so the CI is at least as wide as the brackets allow.\n\n", sp.Baseline, 100*sp.Confidence)
		p("| Config | Shape | Capacity vs %s [%.0f%% CI] | Blocks | p |\n|---|---|---|---|---|\n", sp.Baseline, 100*sp.Confidence)
		for _, c := range rep.Comparisons {
			p("| %s | %s | %s | %d | %s |\n", c.Config, c.Shape, c.Words(), c.N, fmtP(c.P, c.N))
		}
		p("\n")
	}
}

// capacitySearchRow is one search in words: its interval, uncertain band
// and per-block estimate.
type capacitySearchRow struct {
	Config, Shape, Interval, Band, Estimate, Note string
	Probes                                        int
}

// capacitySearchRows is every search of rep in words.
func capacitySearchRows(rep *results.CapacityReport) []capacitySearchRow {
	var out []capacitySearchRow
	for _, s := range rep.Searches {
		r := capacitySearchRow{Config: s.Config, Shape: s.Shape, Interval: IntervalText(s.Lo, s.Hi), Band: "—", Estimate: "—", Note: s.Note, Probes: len(s.Probes)}
		if s.Estimate != nil {
			r.Estimate = fmt.Sprintf("%s [%s, %s] (%d blocks)", fmtNum(*s.Estimate), fmtNum(*s.EstLo), fmtNum(*s.EstHi), len(s.PerBlock))
		}
		if s.BandLo != nil {
			r.Band = fmt.Sprintf("%s–%s", fmtNum(*s.BandLo), fmtNum(*s.BandHi))
		}
		out = append(out, r)
	}
	return out
}

// capacityProbeRow is one probed rate of a search: its verdict, the
// metric's mean with its CI, and its blocks by verdict.
type capacityProbeRow struct {
	Config, Shape        string
	Rate                 float64
	Verdict              results.ProbeVerdict
	Mean                 string
	Bounds               string // each bound's verdict, with several ("ttft_p90 holds, slo_attainment fails")
	OK, Saturated, Other int
}

// capacityProbeRows is every probe of every search of rep.
func capacityProbeRows(rep *results.CapacityReport) []capacityProbeRow {
	var out []capacityProbeRow
	latency := rep.Spec.Constraints()[0].MaxMs != nil
	for _, s := range rep.Searches {
		for _, pr := range s.Probes {
			r := capacityProbeRow{Config: s.Config, Shape: s.Shape, Rate: pr.Rate, Verdict: pr.Verdict, Mean: "—"}
			for _, run := range pr.Runs {
				switch run.Status {
				case results.VerdictOK:
					r.OK++
				case results.VerdictSaturated:
					r.Saturated++
				default:
					r.Other++
				}
			}
			var bs []string
			for _, b := range pr.Bounds {
				bs = append(bs, b.Metric+" "+string(b.Verdict))
			}
			r.Bounds = strings.Join(bs, ", ")
			if pr.Mean != nil {
				r.Mean = fmtNum(*pr.Mean)
				if pr.CILo != nil {
					lo := *pr.CILo
					if latency {
						lo = math.Max(0, lo) // a latency is never negative: a t-interval on two blocks can reach below 0
					}
					r.Mean += fmt.Sprintf(" [%s, %s]", fmtNum(lo), fmtNum(*pr.CIHi))
				}
			}
			out = append(out, r)
		}
	}
	return out
}

// renderCapacityDetails writes how the search judged its probes, and every
// probed rate with its verdict.
func renderCapacityDetails(b *strings.Builder, v *reportView) {
	if v.capacity == nil {
		return
	}
	sp := v.capacity.Spec
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## The search\n\n")
	p("Each probed %s ran once in each of %d blocks "+
		"(every config in the same blocks with the same seeds, in a random order within each); it **holds** when the %.0f%% t-CI "+
		"of the metric's mean over its blocks lies within its bound (%s), **fails** when it lies outside (or the engine saturated), and is "+
		"**uncertain** when it straddles. The capacity lies in [highest rate that held, lowest rate that failed]; the uncertain "+
		"band is where more blocks, not more probes, would narrow it. Only ok runs give the metric; saturated runs count as "+
		"failing; runs with any other verdict are left out. Per block the crossing of the limit is interpolated between the block's last "+
		"rate at or under it and its first rate above it where both were measured; where the one above saturated, the crossing is known "+
		"only to lie in that bracket, and the estimate's CI takes the bracket's ends (widened by the spread a crossing may have inside it), "+
		"not its midpoint.\n\n", strings.TrimSuffix(unitWord(sp), "s"), sp.Blocks, 100*sp.Confidence, sp.BoundsText())
	several := len(sp.Constraints()) > 1
	if several {
		p("With several bounds a probe holds when every bound holds, fails when any fails, and is otherwise uncertain; each block's crossing is where the tightest bound's slack (how far inside its bound the run was, as a share of the bound) reaches 0.\n\n")
	}
	p("Probed %s:\n\n| Config | Shape | %s | Verdict | %s mean [CI] |", unitWord(sp), sp.Unit(), sp.Constraints()[0].Metric)
	if several {
		p(" Bounds |")
	}
	p(" Blocks: ok / saturated / other |\n|---|---|---|---|---|%s---|\n", map[bool]string{true: "---|", false: ""}[several])
	for _, r := range capacityProbeRows(v.capacity) {
		p("| %s | %s | %g | %s | %s |", r.Config, r.Shape, r.Rate, r.Verdict, r.Mean)
		if several {
			p(" %s |", r.Bounds)
		}
		p(" %d / %d / %d |\n", r.OK, r.Saturated, r.Other)
	}
	p("\n")
}

// renderProbes opens the per-run part of a capacity search's report: a
// heading that says the sections below are the probes of the search, and
// the TTFT p90 of every probe as one row per probed cell (the configs probe
// different rates: the fixed-rate table's rate columns would be mostly
// empty).
func renderProbes(b *strings.Builder, v *reportView) {
	s, ordered := v.s, v.ordered
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("## The probes of the search\n\n")
	p("The sections below are per probe: each rate a search probed is a cell (config, shape, rate) whose runs are its blocks. " +
		"The configs probe different rates, so a rate is compared with the baseline only where both probed it; the capacity comparison above is " +
		"the paired result of the search. The Method section's design and stopping rule are those of fixed-rate sweeps: a search's are in its section above.\n\n")
	p("### TTFT p90 of the probes\n\nMean over blocks of each run's p90 TTFT, ± the %.0f%% Student-t CI half-width (\\* saturated runs, † client-limited runs).\n\n", 100*s.Confidence)
	p("| Config | Shape | Rate | TTFT p90 | Runs |\n|---|---|---|---|---|\n")
	for _, cfg := range configsOf(ordered, s) {
		for _, c := range ordered {
			if c.Info.Config == cfg {
				p("| %s | %s | %g | %s | %d |\n", cfg, c.Info.Shape, c.Info.Rate, ttftCell(c), len(c.Runs))
			}
		}
	}
	p("\n")
	if v.dropped > 0 {
		p("The per-probe comparisons with %s leave out %d rows (config × metric) at rates %s did not probe.\n\n", s.Baseline, v.dropped, s.Baseline)
	}
	if len(v.shown) > 0 {
		renderComparisons(b, v)
	}
}

// probedComparisons is rows with only the comparisons that have a baseline
// probe at the same shape and rate (in a capacity search the configs probe
// different rates; the others would only say that the baseline did not
// probe there), and the number left out.
func probedComparisons(s *results.Sweep, ordered []*results.Cell, rows []results.ComparisonRow) (probed []results.ComparisonRow, dropped int) {
	at := map[string]bool{}
	for _, c := range ordered {
		if c.Info.Config == s.Baseline {
			at[fmt.Sprintf("%s@%g", c.Info.Shape, c.Info.Rate)] = true
		}
	}
	for _, r := range rows {
		if at[fmt.Sprintf("%s@%g", r.Shape, r.Rate)] {
			probed = append(probed, r)
		} else {
			dropped++
		}
	}
	return probed, dropped
}

// IntervalText is a capacity interval in words: "[12, 13.5]", "≥ 64"
// (nothing failed), "< 1" (nothing held), or "none probed".
func IntervalText(lo, hi *float64) string {
	switch {
	case lo != nil && hi != nil:
		return fmt.Sprintf("[%s, %s]", fmtNum(*lo), fmtNum(*hi))
	case lo != nil:
		return "≥ " + fmtNum(*lo)
	case hi != nil:
		return "< " + fmtNum(*hi)
	}
	return "none probed"
}

// unitWord is what a search probes, in words (plural).
func unitWord(s results.CapacitySpec) string {
	if s.Over == "concurrency" {
		return "in-flight levels"
	}
	return "rates"
}
