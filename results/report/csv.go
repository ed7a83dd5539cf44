package report

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"slices"
	"strconv"

	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/results"
)

// csvMetrics are the metric columns of tables.csv, in order. The list is
// fixed, so the columns are the same for every sweep; a metric a run does not
// have is an empty field.
var csvMetrics = slices.Concat(
	keys(results.Completed, results.Failed, results.Duration, results.RequestThroughput, results.OutputThroughput, results.Goodput, results.SLOAttainment,
		results.TotalInputTokens, results.TotalOutputTokens),
	latencyKeys([]results.Latency{results.TTFT, results.TPOT, results.ITL, results.E2EL}, results.StatMean, results.StatMedian, results.StatP90, results.StatP99),
	latencyKeys([]results.Latency{results.TTFTIntended}, results.StatP90, results.StatP99),
	keys(results.OfferedRate, results.AchievedRate, results.ThrRatio, results.TTFTSlope,
		results.SendLagP50, results.SendLagP99, results.SendLagMax, results.AchievedSendRatio, results.KSStat, results.KSP, results.ClientCPU, results.NSteps),
	timerKeys(probes.FieldStepDuration, "mean", "p50", "p90", "p99"),
	timerKeys(probes.FieldSchedule, "p50"), timerKeys(probes.FieldBuildMeta, "p50", "p90"), timerKeys(probes.FieldExecute, "p50"), timerKeys(probes.FieldUpdate, "p50"),
	timerKeys(probes.FieldGetFinished, "p50"), timerKeys(probes.FieldUnaccounted, "mean"),
	keys(results.GPUUtilMean, results.GPUEnergy, results.PrefixCacheHitRate, results.BatchQueueSteps),
	timerKeys(probes.FieldLaunch, "p50"), timerKeys(probes.FieldWait, "p50"),
	keys(results.WorkerLines, results.WorkerUnmatched),
	timerKeys(probes.FieldGPU, "p50"),
	classCSVMetrics())

// keys are the keys of ms.
func keys(ms ...results.Metric) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Key
	}
	return out
}

// latencyKeys are the keys of statistics stats of each of ls, latency by latency.
func latencyKeys(ls []results.Latency, stats ...string) []string {
	var out []string
	for _, l := range ls {
		for _, st := range stats {
			out = append(out, l.Key(st))
		}
	}
	return out
}

// timerKeys are the keys of statistics stats of the engine-step timer of
// field f (probes.FieldNames).
func timerKeys(f int, stats ...string) []string {
	var out []string
	for _, st := range stats {
		out = append(out, timerKey(f, st))
	}
	return out
}

// timerKey is the key of statistic stat of the engine-step timer of field f.
func timerKey(f int, stat string) string { return results.StepTimerKey(probes.FieldNames[f], stat) }

// Keys of the report's fixed figures: the latency the comparison table
// and the plots lead with, the engine's median step time.
var (
	ttftP90 = results.TTFT.Key(results.StatP90)
	stepP50 = timerKey(probes.FieldStepDuration, "p50")
)

// csvSpread are the metrics whose CI half-width and CV get their own columns
// (filled on cell rows only).
var csvSpread = []string{ttftP90, results.TPOT.Key(results.StatP90), results.E2EL.Key(results.StatP90), stepP50, results.RequestThroughput.Key, results.Goodput.Key, results.SLOAttainment.Key}

// csvHeader returns the column names of tables.csv.
func csvHeader() []string {
	h := []string{"level", "simulated", "cell", "config", "shape", "rate", "same_as", "block", "status", "used", "saturated", "client_limited", "n"}
	h = append(h, csvMetrics...)
	for _, m := range csvSpread {
		h = append(h, m+"_half_width", m+"_cv")
	}
	return h
}

// renderCSV writes tables.csv: one row per cell (level "cell": metric columns
// hold the mean across used runs) and one per run (level "run"), cells in
// table order, each cell row followed by its runs by block.
func renderCSV(a *results.Analysis, redact func(string) string) ([]byte, error) {
	s := &a.Sweep
	rows := [][]string{csvHeader()}
	add := func(row []string) {
		for i := range row {
			row[i] = redact(row[i])
		}
		rows = append(rows, row)
	}
	for _, c := range a.Ordered {
		status := "ok"
		if c.Sum.NRuns == 0 {
			status = "missing"
		}
		row := []string{"cell", strconv.FormatBool(s.Simulated), c.Info.ID, c.Info.Config, c.Info.Shape, fmtFloat(c.Info.Rate), c.Info.SameAs, "", status,
			"", strconv.FormatBool(c.Sum.SaturatedRuns > 0), strconv.FormatBool(c.Sum.ClientLimitedRuns > 0), strconv.Itoa(c.Sum.NRuns)}
		for _, k := range csvMetrics {
			row = append(row, optFloat(c.Sum.Metrics[k].Mean))
		}
		for _, k := range csvSpread {
			row = append(row, optFloat(c.Sum.Metrics[k].HalfWidth), optFloat(c.Sum.Metrics[k].CV))
		}
		add(row)
		for _, r := range c.Runs {
			used := r.Problem == "" && r.Sum != nil
			sat, cl := r.Ref.Status == results.VerdictSaturated, false
			if r.Sum != nil {
				sat, cl = sat || r.Sum.Saturated, r.Sum.ClientLimited
			}
			row := []string{"run", strconv.FormatBool(s.Simulated), c.Info.ID, c.Info.Config, c.Info.Shape, fmtFloat(c.Info.Rate), c.Info.SameAs,
				strconv.Itoa(r.Ref.Block), string(r.Ref.Status), strconv.FormatBool(used), strconv.FormatBool(sat), strconv.FormatBool(cl), ""}
			for _, k := range csvMetrics {
				row = append(row, runFloat(r.Metrics, k))
			}
			for range csvSpread {
				row = append(row, "", "")
			}
			add(row)
		}
	}
	var buf bytes.Buffer
	if err := csv.NewWriter(&buf).WriteAll(rows); err != nil {
		return nil, fmt.Errorf("export: tables.csv: %w", err)
	}
	return buf.Bytes(), nil
}

// fmtFloat formats a number with 10 significant digits (stable across
// platforms whose last-bit rounding differs).
func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', 10, 64) }

// optFloat formats an optional number; empty when nil.
func optFloat(v *float64) string {
	if v == nil {
		return ""
	}
	return fmtFloat(*v)
}

// runFloat formats a run's metric k; empty when the run has none.
func runFloat(m map[string]float64, k string) string {
	if v, ok := m[k]; ok {
		return fmtFloat(v)
	}
	return ""
}

// classCSVMetrics are the class and per-instance columns of tables.csv.
func classCSVMetrics() []string {
	var out []string
	for _, n := range results.ClassNames {
		p := results.ClassMetric(n, "")
		out = append(out, p+results.ClassRequests, p+results.ClassCompleted, p+results.ClassShare, p+results.ClassInputP50, p+results.ClassFailed, p+results.ClassFailRate, p+results.ClassFailedInputP50,
			p+results.TTFT.Key(results.StatMedian), p+ttftP90, p+results.TPOT.Key(results.StatP90), p+results.E2EL.Key(results.StatMedian))
	}
	return append(out, instanceCSVMetrics...)
}
