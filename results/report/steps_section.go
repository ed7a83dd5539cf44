package report

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/results"
)

// The per-step section of report.md: one row per cell with the step's
// timed parts on the path the engine took, the GPU time where it was
// measured (never inferred from wait_us or the step duration), and in words
// which batch each part belongs to and what the timers do not cover.

// stepColumns are the per-step parts shown, in order: metric key (the
// timer's p50), header (the timer without its unit).
var stepColumns = func() []struct{ key, head string } {
	var out []struct{ key, head string }
	for _, f := range []int{probes.FieldSchedule, probes.FieldBuildMeta, probes.FieldLaunch, probes.FieldExecute, probes.FieldWait, probes.FieldUpdate, probes.FieldGetFinished} {
		out = append(out, struct{ key, head string }{timerKey(f, "p50"), strings.TrimSuffix(probes.FieldNames[f], "_us")})
	}
	return out
}()

// noGPUWords is the reason given for a run whose summary predates the GPU
// timer (no gpu_us, no reason recorded).
const noGPUWords = "no step carried gpu_us and no status line said why"

// stepPath says in words which path a cell's steps took.
func stepPath(m map[string]results.MetricStats) string {
	n, bq := m["n_steps"], m["batch_queue_steps"]
	switch {
	case !hasMetric(m, "batch_queue_steps") || *bq.Mean == 0:
		return "step()"
	case hasMetric(m, "n_steps") && *bq.Mean >= *n.Mean:
		return "batch queue"
	default:
		return "mixed"
	}
}

// cellStepFacts gathers, over a cell's used runs, the GPU timing and the
// hooks the engine could not apply (from the step logs' status lines).
type cellStepFacts struct {
	gpuMeasured bool
	gpuSource   []string
	gpuReasons  []string
	incomplete  []string
	// hostBound of gpuTimed GPU-timed batches were host-bound: their span
	// is an upper bound, left out of gpu_us.
	hostBound, gpuTimed int64
}

func stepFacts(c *results.Cell) cellStepFacts {
	var f cellStepFacts
	for _, b := range slices.Sorted(maps.Keys(c.Used)) {
		r := c.Used[b]
		if r == nil || r.Sum == nil || r.Sum.EngineStep == nil {
			continue
		}
		st := r.Sum.EngineStep
		f.hostBound += st.GPU.HostBound
		f.gpuTimed += st.GPU.Steps + st.GPU.Late + st.GPU.HostBound
		if st.GPU.Measured {
			f.gpuMeasured = true
			if st.GPU.Source != "" {
				f.gpuSource = appendOnce(f.gpuSource, st.GPU.Source)
			}
		} else if st.NSteps > 0 {
			f.gpuReasons = appendOnce(f.gpuReasons, cmp.Or(st.GPU.Reason, noGPUWords))
		}
		for _, s := range st.Incomplete {
			f.incomplete = appendOnce(f.incomplete, s)
		}
	}
	return f
}

// renderSteps writes the "Per-Step Latency" table and says in words
// which batch each timer belongs to, whether GPU time was measured, and
// where the timers do not decompose the step (a decomposition claimed
// from timers that did not cover it: docs/design.md).
func renderSteps(b *strings.Builder, v *reportView) {
	ordered := v.ordered
	if !results.AnyCellHas(ordered, stepP50) {
		if name := stepless(ordered); name != "" {
			collapsed(b, "Per-step latency", "%s writes no per-step log (engine_step.jsonl): per-step latency is not measured for this engine.", name)
			return
		}
		collapsed(b, "Per-step latency", "no run that is a result has engine-step data (engine_step.jsonl missing or empty, or no run was a result): per-step latency was not measured.")
		return
	}
	b.WriteString("## Per-Step Latency (from engine_step.jsonl)\n\n")
	b.WriteString("Mean over runs of each run's per-step p50 (p90 for the step), in µs. \"not timed\" means the engine did not log that part (it is never shown as 0). GPU time is gpu_us, measured with CUDA events around the model forward; where it was not measured the column says so — it is never taken from wait_us or the step duration.\n\n")
	b.WriteString("| Config | Shape | Rate | Path | step p50 | step p90 |")
	for _, col := range stepColumns {
		b.WriteString(" " + col.head + " |")
	}
	b.WriteString(" GPU time | unaccounted share | n_steps per run |\n|---|---|---|---|---|---|")
	b.WriteString(strings.Repeat("---|", len(stepColumns)) + "---|---|---|\n")
	f := stepFindings{noGPU: map[string][]string{}}
	for _, c := range ordered {
		if _, ok := c.Sum.Metrics[stepP50]; !ok {
			fmt.Fprintf(b, "| %s | %s | %g | no data |%s\n", c.Info.Config, c.Info.Shape, c.Info.Rate, strings.Repeat(" |", len(stepColumns)+5))
			continue
		}
		f.addCell(b, c)
	}
	b.WriteString("\n")
	f.writeNotes(b)
}

// stepFindings are what the notes under the step table say, collected
// over its cells.
type stepFindings struct {
	noUnacc, noGetFin, bqCfgs, stepCfgs, gpuMeasured, unmatched, large, unhooked, partly, incomplete []string
	gpuWhy                                                                                           []string            // the reasons GPU time was not measured, in order
	noGPU                                                                                            map[string][]string // reason → configs
}

// addCell writes the row of cell c, which has step data, and collects its
// findings.
func (f *stepFindings) addCell(b *strings.Builder, c *results.Cell) {
	m := c.Sum.Metrics
	get := func(k string) string {
		if v, ok := m[k]; ok && v.Mean != nil {
			return fmtNum(*v.Mean)
		}
		return "not timed"
	}
	where := fmt.Sprintf("%s at rate=%g (%s)", c.Info.Config, c.Info.Rate, c.Info.Shape)
	share := "not measured"
	u, uok := m[timerKey(probes.FieldUnaccounted, "mean")]
	d, dok := m[timerKey(probes.FieldStepDuration, "mean")]
	switch {
	case !uok || u.Mean == nil:
		f.noUnacc = appendOnce(f.noUnacc, c.Info.Config)
	case dok && d.Mean != nil && *d.Mean > 0:
		frac := *u.Mean / *d.Mean
		share = fmtPct(&frac)
		if frac > unaccountedLarge {
			f.large = append(f.large, fmt.Sprintf("%s: %s of step time is covered by no timer", where, share))
		}
	}
	if !hasMetric(m, timerKey(probes.FieldGetFinished, "p50")) {
		f.noGetFin = appendOnce(f.noGetFin, c.Info.Config)
	}
	path := stepPath(m)
	if path == "step()" {
		f.stepCfgs = appendOnce(f.stepCfgs, c.Info.Config)
	} else {
		f.bqCfgs = appendOnce(f.bqCfgs, c.Info.Config)
	}
	facts := stepFacts(c)
	gpu := "not measured"
	if facts.gpuMeasured && hasMetric(m, timerKey(probes.FieldGPU, "p50")) {
		gpu = get(timerKey(probes.FieldGPU, "p50"))
		f.gpuMeasured = appendOnce(f.gpuMeasured, fmt.Sprintf("%s (%s)", c.Info.Config, cmp.Or(strings.Join(facts.gpuSource, "; "), "CUDA events")))
		if facts.hostBound > 0 {
			f.partly = append(f.partly, fmt.Sprintf("%s: %d of %d GPU-timed batches", where, facts.hostBound, facts.gpuTimed))
		}
	} else {
		why := cmp.Or(strings.Join(facts.gpuReasons, "; "), noGPUWords)
		if _, ok := f.noGPU[why]; !ok {
			f.gpuWhy = append(f.gpuWhy, why)
		}
		f.noGPU[why] = appendOnce(f.noGPU[why], c.Info.Config)
	}
	for _, s := range facts.incomplete {
		f.incomplete = appendOnce(f.incomplete, fmt.Sprintf("%s: decomposition incomplete: %s", c.Info.Config, s))
	}
	if len(facts.incomplete) == 0 && (!hasMetric(m, timerKey(probes.FieldSchedule, "p50")) || !hasMetric(m, timerKey(probes.FieldUpdate, "p50")) ||
		(!hasMetric(m, timerKey(probes.FieldExecute, "p50")) && !hasMetric(m, timerKey(probes.FieldLaunch, "p50")))) {
		f.unhooked = appendOnce(f.unhooked, c.Info.Config)
	}
	if hasMetric(m, "worker_unmatched") && *m["worker_unmatched"].Mean > 0 {
		f.unmatched = append(f.unmatched, fmt.Sprintf("%s: %s of %s worker get_finished lines per run fell in no step", where, get("worker_unmatched"), get("worker_lines")))
	}
	fmt.Fprintf(b, "| %s | %s | %g | %s | %s | %s |", c.Info.Config, c.Info.Shape, c.Info.Rate, path, get(stepP50), get(timerKey(probes.FieldStepDuration, "p90")))
	for _, col := range stepColumns {
		b.WriteString(" " + get(col.key) + " |")
	}
	fmt.Fprintf(b, " %s | %s | %s |\n", gpu, share, get("n_steps"))
}

// writeNotes writes the sentences under the table.
func (f *stepFindings) writeNotes(b *strings.Builder) {
	notes := []stepNote{
		{f.bqCfgs, ", ", "%s ran the batch queue (async scheduling, on by default since vLLM 0.14, or pipeline parallelism): a step schedules and launches a new batch and collects an earlier one. schedule, build_meta and launch belong to the new batch (launch: handing it to the executor; with one GPU the CPU side of its forward); wait, update and the GPU time belong to the collected batch. wait is the engine thread blocked on that batch's result — not its GPU time: a CPU-bound step waits little while its GPU still works. There is no execute on this path.\n\n"},
		{f.stepCfgs, ", ", "%s ran step() (no async scheduling): every part belongs to the step's one batch; execute spans handing it to the executor, waiting for its result and sampling.\n\n"},
		{f.gpuMeasured, "; ", "GPU time measured for %s: gpu_us of the batch each step collected, joined to it by batch id; where the source says a random 1 in N forwards, the column is those batches' GPU time and the others carry none (never an estimate).\n\n"},
		{f.partly, "; ", "**GPU time partly measured** — host-bound batches left out (%s): the GPU reached the forward's start event before the host had launched the forward, so their span holds host time, an upper bound of their GPU time; the column is the other batches' GPU time.\n\n"},
	}
	for _, why := range f.gpuWhy {
		notes = append(notes, stepNote{f.noGPU[why], ", ", "**GPU time not measured** for %s: " + strings.ReplaceAll(why, "%", "%%") + ". It is not inferred from wait or the step duration.\n\n"})
	}
	notes = append(notes,
		stepNote{f.incomplete, "; ", "**%s**; the part a missing hook times is absent from every line and its time is in unaccounted.\n\n"},
		stepNote{f.unhooked, ", ", "**Decomposition incomplete** for %s: schedule, update or the execute/launch phase was not timed and the log names no hook (no status line: an older plugin, or an engine that times fewer parts); that time is in unaccounted_us.\n\n"},
		stepNote{f.noUnacc, ", ", "**Decomposition incomplete** for %s: the step log has no unaccounted_us, so nothing shows that the timers cover the whole step. The timed phases say what they cost, not what share of the step they are; \"all of the per-step cost is in one phase\" cannot be concluded from them.\n\n"},
		stepNote{f.noGetFin, ", ", "get_finished was not timed for %s.\n\n"},
		stepNote{f.unmatched, "; ", "Worker timings outside every step: %s; their time is in no step line.\n\n"},
		stepNote{f.large, "; ", "**Decomposition incomplete**: %s.\n\n"},
	)
	for _, n := range notes {
		if len(n.list) > 0 {
			fmt.Fprintf(b, n.format, strings.Join(n.list, n.sep))
		}
	}
}

// stepNote is one sentence of the section: format takes the joined list.
type stepNote struct {
	list   []string
	sep    string
	format string
}
