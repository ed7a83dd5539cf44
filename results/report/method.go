package report

import (
	"cmp"
	"fmt"
	"math"
	"strings"

	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/results"
)

// renderMethod writes report.md's method section: the design, the primary
// metric, the stopping rule, the comparisons and the nuisance effect, in
// plain words, with this sweep's figures.
func renderMethod(b *strings.Builder, v *reportView) {
	s := v.s
	conf, alpha := 100*s.Confidence, 1-s.Confidence
	b.WriteString("## Method\n\n")
	b.WriteString("- **Design.** Every block runs every cell once. The orders come from a Williams design (a balanced Latin square), seeded and recorded in sweep.json, taken as pairs of mirror-image blocks: after an even number of blocks every cell has, on average, run in the middle of the block and every pair of cells has run in both orders equally often, so a machine that warms or drifts during a block cannot favour one config; after a whole square every cell has been in every position and after every other cell equally often.")
	if s.Design != "" {
		fmt.Fprintf(b, " This sweep: %s.", s.Design)
	}
	b.WriteString(" Within a block every config gets the same seeded workload, so each config is paired with its baseline block by block.\n")
	fmt.Fprintf(b, "- **Primary metric: %s** (%s), declared before the sweep. Its comparisons (the configs against %s and the A/A controls against their originals) are one family, Holm-corrected together; every other metric is **secondary**: shown for context, Holm-corrected within its own table, and never what the sweep was sized for.\n",
		s.Metric, s.Primary().Key, cmp.Or(s.Baseline, "the baseline"))
	ruleConf := conf
	if s.RecordedConfidence > 0 {
		ruleConf = 100 * s.RecordedConfidence // the rule ran at the sweep's level, whatever this analysis uses
	}
	if s.Stage1 > 0 {
		target := ""
		if s.RelCI > 0 {
			target = fmt.Sprintf(" of ±%.1f%%", 100*s.RelCI)
		}
		fmt.Fprintf(b, "- **Stopping rule.** The first %d usable pairs of each comparison are its first stage: they plan the sweep. After at least as many blocks again (the second stage), and after complete pairs of blocks, the sweep stops once every comparison on the primary metric is within the target%s twice over: its projected %.0f%% CI half-width — the first stage's spread over all blocks so far (Stein's two-stage procedure) — and the CI this report prints when the rule ends a sweep, whose spread comes from the second-stage pairs alone (a quiet first stage is what lets the rule stop, so a CI with its spread would be too narrow exactly then); otherwise at the maximum number of blocks or when the time budget is spent. A run lost in the first stage (not a result) moves the stage's end one pair on rather than switching the rule off, and a run the load generator could not drive on schedule (client_limited) is run again in place, up to twice; a comparison without two usable pairs in each stage is never within target. ",
			s.Stage1, target, ruleConf)
		if s.RuleStop {
			b.WriteString("**This sweep was ended by the rule**: every primary CI printed here takes its spread from the second stage (method `second-stage`) and is within the target, which is what \"converged\" says.\n")
		} else {
			b.WriteString("This sweep was not ended by the rule (a maximum, a budget, or not finished): nothing selected a quiet first stage, every comparison is an ordinary paired t over all its blocks (method `paired-t`), and the sweep does not claim to have converged; a comparison an only_unconverged sweep stopped running takes its spread from the second stage.\n")
		}
	} else {
		b.WriteString("- **Stopping rule.** No first stage recorded: every comparison is an ordinary paired t over all blocks.\n")
	}
	fmt.Fprintf(b, "- **Comparisons.** Per block the log ratio config/baseline; its mean gets a %.0f%% Student-t CI, shown as a percent change [low, high]. A change is printed only when the Holm-corrected p < %.2g and the CI excludes 0; otherwise it is \"within noise (±half-width; could detect ±d)\", never a number of its own, where d is the smallest change the comparison would have found 4 times in 5 (its minimum detectable effect at 80%% power: the half-width × (z₁₋α/₂ + z₀.₈)/z₁₋α/₂ in log space, 1.43× at 95%%). The A/A line says the noise floor holds only when every A/A interval is within the target half-width (repeat.rel_ci); a wider one measures no floor, and effects below its half-width cannot be told from noise. Only runs whose verdict is ok count. The Mann–Whitney U p (unpaired, uncorrected) is shown for reference.\n", conf, alpha)
	b.WriteString("- **What counts as a result.** " + VerdictRule + "\n")
	if note := energyNote(v.ordered); note != "" {
		b.WriteString("- **GPU energy** (`gpu_energy_j`). " + note + "\n")
	}
	b.WriteString("- **Position in the block (nuisance effect).** Fitted across the whole sweep, per metric: log(value) = cell + block + γ·position. When γ is significant it is taken out of every comparison (each block's log ratio is corrected by γ times the two cells' distance in the block, and γ's uncertainty is added to the CI).\n\n")
	if len(v.a.Nuisance) == 0 {
		return
	}
	b.WriteString("| Metric | Effect per position later in the block | p | Runs | Used in the comparisons |\n|---|---|---|---|---|\n")
	for _, n := range v.a.Nuisance {
		if !n.Estimated {
			fmt.Fprintf(b, "| %s | not estimable (too few runs or no position spread) | — | %d | no |\n", n.Metric, n.Runs)
			continue
		}
		used := "no (not significant)"
		if n.Used {
			used = "yes"
		}
		fmt.Fprintf(b, "| %s | %+.2f%% [%+.2f, %+.2f] | %s | %d | %s |\n", n.Metric, 100*math.Expm1(n.PerPosition), 100*n.Lo, 100*n.Hi, fmtP(n.P, n.Runs), n.Runs, used)
	}
	b.WriteString("\n")
}

// energyNote says where the runs' GPU energy came from: NVML's total-energy
// counter, or power integrated over the samples (the fallback, marked);
// "" when no run has GPU samples.
func energyNote(ordered []*results.Cell) string {
	var counter, power int
	for _, c := range ordered {
		for _, r := range c.Runs {
			if r.Sum == nil || r.Sum.GPU == nil {
				continue
			}
			for _, g := range r.Sum.GPU.PerGPU {
				switch g.EnergySource {
				case probes.EnergyFromCounter:
					counter++
				default: // power integration, or a summary from before energy_source
					power++
				}
			}
		}
	}
	switch {
	case counter+power == 0:
		return ""
	case power == 0:
		return fmt.Sprintf("From NVML's total-energy counter: its rise from the first to the last sample of each run (%d GPU-runs).", counter)
	}
	const why = "a fallback, where the GPU has no energy counter or it was unreadable: NVML's power is an average over up to a second, and under a load step the integral read 3.7% low on an H200"
	if counter == 0 {
		return fmt.Sprintf("**Integrated from power readings** on all %d GPU-runs (%s).", power, why)
	}
	return fmt.Sprintf("From NVML's total-energy counter on %d GPU-runs; **integrated from power readings on %d** (%s). Each GPU's `energy_source` in summary_A.json says which.", counter, power, why)
}
