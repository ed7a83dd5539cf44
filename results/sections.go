package results

import (
	"fmt"
	"strings"

	"github.com/mbench/mbench/openloop"
)

// renderSteps writes the seed-000 "Per-Step Latency" table and says in words
// where the timers do not decompose the step (seed 001).
func renderSteps(b *strings.Builder, ordered []*cellData) {
	b.WriteString("## Per-Step Latency (from engine_step.jsonl)\n\n")
	any := anyCellHas(ordered, "step_duration_us_p50")
	if !any {
		if name := stepless(ordered); name != "" {
			fmt.Fprintf(b, "%s writes no per-step log (engine_step.jsonl): per-step latency is not measured for this engine.\n\n", name)
			return
		}
		b.WriteString("No run has engine-step data (engine_step.jsonl missing or empty): per-step latency was not measured.\n\n")
		return
	}
	b.WriteString("Mean over runs of each run's per-step quantiles, in µs. \"not timed\" means the engine did not log that timer (it is never shown as 0). The GPU-time column says where, if anywhere, a step's GPU time was measured.\n\n")
	b.WriteString("| Config | Shape | Rate | step_duration p50 | step_duration p90 | build_meta p50 | build_meta p90 | get_finished p50 | wait p50 | GPU time | unaccounted share | n_steps per run |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var noUnacc, noGetFin, bqCfgs, noGPU, unhooked []string
	var large, unmatched []string
	for _, c := range ordered {
		m := c.Sum.Metrics
		if _, ok := m["step_duration_us_p50"]; !ok {
			fmt.Fprintf(b, "| %s | %s | %g | no data | | | | | | | | |\n", c.Info.Config, c.Info.Shape, c.Info.Rate)
			continue
		}
		get := func(k string) string {
			if v, ok := m[k]; ok && v.Mean != nil {
				return fmtNum(*v.Mean)
			}
			return "not timed"
		}
		has := func(k string) bool { return hasMetric(m, k) }
		share := "not measured"
		u, uok := m["unaccounted_us_mean"]
		d, dok := m["step_duration_us_mean"]
		where := fmt.Sprintf("%s at rate=%g (%s)", c.Info.Config, c.Info.Rate, c.Info.Shape)
		switch {
		case !uok || u.Mean == nil:
			noUnacc = appendOnce(noUnacc, c.Info.Config)
		case dok && d.Mean != nil && *d.Mean > 0:
			frac := *u.Mean / *d.Mean
			share = fmtPct(&frac)
			if frac > unaccountedLarge {
				large = append(large, fmt.Sprintf("%s: %s of step time is covered by no timer", where, share))
			}
		}
		if !has("get_finished_us_p50") {
			noGetFin = appendOnce(noGetFin, c.Info.Config)
		}
		gpu := stepGPUTime(m)
		switch {
		case has("batch_queue_steps") && *m["batch_queue_steps"].Mean > 0:
			bqCfgs = appendOnce(bqCfgs, c.Info.Config)
			if !has("wait_us_p50") {
				noGPU = appendOnce(noGPU, c.Info.Config)
			}
		case !has("execute_us_p50"):
			noGPU = appendOnce(noGPU, c.Info.Config)
		}
		if !has("schedule_us_p50") || !has("update_us_p50") || (!has("execute_us_p50") && !has("launch_us_p50")) {
			unhooked = appendOnce(unhooked, c.Info.Config)
		}
		if has("worker_unmatched") && *m["worker_unmatched"].Mean > 0 {
			unmatched = append(unmatched, fmt.Sprintf("%s: %s of %s worker get_finished lines per run fell in no step", where, get("worker_unmatched"), get("worker_lines")))
		}
		fmt.Fprintf(b, "| %s | %s | %g | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Info.Config, c.Info.Shape, c.Info.Rate,
			get("step_duration_us_p50"), get("step_duration_us_p90"), get("build_meta_us_p50"), get("build_meta_us_p90"),
			get("get_finished_us_p50"), get("wait_us_p50"), gpu, share, get("n_steps"))
	}
	b.WriteString("\n")
	for _, n := range []struct {
		list   []string
		sep    string
		format string
	}{
		{bqCfgs, ", ", "%s ran with the batch queue (async scheduling or pipeline parallelism): a step line there schedules one batch and collects an earlier one. Its engine-thread time is split into launch_us (handing the new batch to the executor; with one GPU this includes the CPU side of the forward) and wait_us (blocked on the earlier batch's results: the part of its GPU time not hidden behind CPU work); update_us belongs to the earlier batch, the token counts to the new one. A step with wait_us > 0 was GPU-bound and its duration is the GPU time per batch; where wait_us is 0 the GPU time is hidden behind CPU work and was not measured.\n\n"},
		{noGPU, ", ", "**GPU time not measured** for %s: no timer covered the wait for the model's results (execute_us on the step() path, wait_us under the batch queue).\n\n"},
		{unhooked, ", ", "**Decomposition incomplete** for %s: schedule, update or the execute phase was not timed (a hook could not be applied to the engine's scheduler or executor); that time is in unaccounted_us.\n\n"},
		{noUnacc, ", ", "**Decomposition incomplete** for %s: the step log has no unaccounted_us, so nothing shows that the timers cover the whole step. The timed phases say what they cost, not what share of the step they are; \"all of the per-step cost is in one phase\" cannot be concluded from them.\n\n"},
		{noGetFin, ", ", "get_finished was not timed for %s.\n\n"},
		{unmatched, "; ", "Worker timings outside every step: %s; their time is in no step line.\n\n"},
		{large, "; ", "**Decomposition incomplete**: %s.\n\n"},
	} {
		if len(n.list) > 0 {
			fmt.Fprintf(b, n.format, strings.Join(n.list, n.sep))
		}
	}
}

// stepGPUTime says in words where a cell's step lines measured GPU time.
func stepGPUTime(m map[string]MetricStats) string {
	has := func(k string) bool { return hasMetric(m, k) }
	if has("batch_queue_steps") && *m["batch_queue_steps"].Mean > 0 {
		if has("wait_us_p50") {
			return "wait_us, when > 0 (batch queue)"
		}
		return "not measured (batch queue, no wait_us)"
	}
	if has("execute_us_p50") {
		return "inside execute_us (step())"
	}
	return "not measured"
}

// hasMetric reports whether a cell has a mean for metric k.
func hasMetric(m map[string]MetricStats, k string) bool {
	v, ok := m[k]
	return ok && v.Mean != nil
}

// appendOnce appends s to list unless it is already there.
func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// renderComparisons writes the method, the comparison and the A/A tables.
func renderComparisons(b *strings.Builder, s *ExportInput, rep *Report) {
	renderMethod(b, s, rep)
	fmt.Fprintf(b, "## Comparisons with %s\n\n", orDefault(s.Baseline, "the baseline"))
	switch {
	case s.Baseline == "":
		b.WriteString("No baseline config named: no comparisons.\n\n")
	case len(rep.Comparisons) == 0:
		b.WriteString("Only the baseline config ran: nothing to compare.\n\n")
	default:
		for _, metric := range comparedMetrics(s) {
			role := "secondary"
			if ResolveMetric(metric) == ResolveMetric(s.Metric) {
				role = "primary"
			}
			fmt.Fprintf(b, "### %s (%s) — %s\n\n| Config | Shape | Rate | Change vs %s | p (Holm) | p (Mann–Whitney) | Blocks |\n|---|---|---|---|---|---|---|\n", metric, ResolveMetric(metric), role, s.Baseline)
			for _, r := range rep.Comparisons {
				if r.Metric == metric {
					fmt.Fprintf(b, "| %s | %s | %g | %s | %s | %s | %d |\n", r.Config, r.Shape, r.Rate, r.Text(), fmtP(r.PAdj, r.N), fmtP(r.PMW, r.N), r.N)
				}
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("## A/A noise floor\n\n")
	if len(rep.NoiseFloor) == 0 {
		b.WriteString("No A/A control in this sweep. Declare one (for example `plain_aa: {same_as: plain}`) to measure the noise floor of the comparisons directly.\n\n")
		return
	}
	b.WriteString("An A/A control runs the same config as its original under another name, so any difference between the two is noise: these rows are the measured noise floor of the comparisons above (same method; on the primary metric they are in the same Holm family as the comparisons, on secondary metrics Holm-corrected within each metric).\n\n")
	b.WriteString("| A/A config | Same as | Shape | Rate | Metric | Difference | p (Holm) | Blocks |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.NoiseFloor {
		metric := r.Metric + " (secondary)"
		if r.Primary {
			metric = r.Metric + " (primary)"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %g | %s | %s | %s | %d |\n", r.Config, r.Baseline, r.Shape, r.Rate, metric, r.Text(), fmtP(r.PAdj, r.N), r.N)
	}
	b.WriteString("\n")
	for _, r := range rep.NoiseFloor {
		if r.Significant() {
			fmt.Fprintf(b, "**Warning**: the A/A control %s differs from %s in %s at rate=%g (%s); the comparisons above are not trustworthy until this is explained (ordering, warm-up, thermal state).\n\n", r.Config, r.Baseline, r.Metric, r.Rate, r.Shape)
		}
	}
}

// renderClientLimited says in words which runs the load generator could not
// drive at their schedule.
func renderClientLimited(b *strings.Builder, ordered []*cellData) {
	b.WriteString("## Client-limited runs\n\n")
	n := 0
	for _, c := range ordered {
		for _, r := range c.Sum.Runs {
			if r.Used && r.ClientLimited {
				n++
				fmt.Fprintf(b, "- %s b%d (%s, rate=%g, %s): %s. Its latencies include time the request spent waiting in the client.\n", c.Info.ID, r.Block, c.Info.Config, c.Info.Rate, c.Info.Shape, orDefault(r.ClientLimitedReason, "marked client-limited"))
			}
		}
	}
	if n == 0 {
		fmt.Fprintf(b, "None: in every run the load generator kept to its schedule (no more than %.0f%% of sends over %.0f ms late, ≥ %.2f of the requests sent within the schedule's window and, for Poisson and gamma arrivals, the KS distance of the sent gaps within %.2f of its critical value at α = %.2g).\n",
			100*openloop.ClientLateShare, openloop.ClientLateMs, openloop.ClientLimitedRatio, openloop.ClientLimitedKSMaxD, openloop.ClientLimitedKSAlpha)
	}
	b.WriteString("\n")
}

// renderProblems lists missing cells, missing blocks, failed runs and
// warnings.
func renderProblems(b *strings.Builder, ordered []*cellData, rep *Report) {
	b.WriteString("## Runs that are not results, and missing cells\n\n")
	var lines []string
	for _, c := range ordered {
		id := fmt.Sprintf("%s (%s, rate=%g, %s)", c.Info.ID, c.Info.Config, c.Info.Rate, c.Info.Shape)
		switch {
		case c.Sum.NRuns == 0:
			lines = append(lines, fmt.Sprintf("- cell %s: **missing** — no usable run", id))
		case len(c.Sum.MissingBlocks) > 0:
			bs := make([]string, len(c.Sum.MissingBlocks))
			for i, x := range c.Sum.MissingBlocks {
				bs[i] = fmt.Sprint(x)
			}
			lines = append(lines, fmt.Sprintf("- cell %s: no usable run in block %s", id, strings.Join(bs, ", ")))
		}
		for _, r := range c.Sum.Runs {
			if !r.Used {
				lines = append(lines, fmt.Sprintf("- run %s b%d: **%s** — %s", c.Info.ID, r.Block, r.Status, orDefault(r.Reason, "no reason recorded")))
			}
		}
	}
	for _, w := range rep.Warnings {
		lines = append(lines, "- "+w)
	}
	if len(lines) == 0 {
		b.WriteString("None: every cell has a usable run in every block.\n\n")
		return
	}
	b.WriteString(strings.Join(lines, "\n") + "\n\n")
}

// anyCellHas reports whether some cell's summary has the metric key.
func anyCellHas(ordered []*cellData, key string) bool {
	for _, c := range ordered {
		if _, ok := c.Sum.Metrics[key]; ok {
			return true
		}
	}
	return false
}
