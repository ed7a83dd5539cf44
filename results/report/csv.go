package report

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"strconv"

	"github.com/mbench/mbench/results"
)

// csvMetrics are the metric columns of tables.csv, in order. The list is
// fixed, so the columns are the same for every sweep; a metric a run does not
// have is an empty field.
var csvMetrics = append([]string{
	"completed", "failed", "duration", "request_throughput", "output_throughput", results.MetricGoodput, results.MetricSLOAttainment,
	"total_input_tokens", "total_output_tokens",
	"mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
	"mean_tpot_ms", "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms",
	"mean_itl_ms", "median_itl_ms", "p90_itl_ms", "p99_itl_ms",
	"mean_e2el_ms", "median_e2el_ms", "p90_e2el_ms", "p99_e2el_ms",
	"p90_ttft_intended_ms", "p99_ttft_intended_ms",
	"offered_rate", "achieved_rate", "thr_ratio", "ttft_slope_ms_per_s",
	"send_lag_p50_ms", "send_lag_p99_ms", "send_lag_max_ms", "achieved_send_ratio", "ks_stat", "ks_p", "client_cpu_pct",
	"n_steps", "step_duration_us_mean", "step_duration_us_p50", "step_duration_us_p90", "step_duration_us_p99",
	"schedule_us_p50", "build_meta_us_p50", "build_meta_us_p90", "execute_us_p50", "update_us_p50",
	"get_finished_us_p50", "unaccounted_us_mean",
	"gpu_util_mean", "gpu_energy_j", "prefix_cache_hit_rate",
	"batch_queue_steps", "launch_us_p50", "wait_us_p50", "worker_lines", "worker_unmatched", "gpu_us_p50",
}, classCSVMetrics()...)

// csvSpread are the metrics whose CI half-width and CV get their own columns
// (filled on cell rows only).
var csvSpread = []string{"p90_ttft_ms", "p90_tpot_ms", "p90_e2el_ms", "step_duration_us_p50", "request_throughput", results.MetricGoodput, results.MetricSLOAttainment}

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
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	red := func(row []string) []string {
		for i := range row {
			row[i] = redact(row[i])
		}
		return row
	}
	if err := w.Write(csvHeader()); err != nil {
		return nil, fmt.Errorf("export: tables.csv: %w", err)
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
		if err := w.Write(red(row)); err != nil {
			return nil, fmt.Errorf("export: tables.csv: %w", err)
		}
		for _, r := range c.Runs {
			used := r.Problem == "" && r.Sum != nil
			sat, cl := r.Ref.Status == results.VerdictSaturated, false
			if r.Sum != nil {
				sat, cl = sat || r.Sum.Saturated, r.Sum.ClientLimited
			}
			row := []string{"run", strconv.FormatBool(s.Simulated), c.Info.ID, c.Info.Config, c.Info.Shape, fmtFloat(c.Info.Rate), c.Info.SameAs,
				strconv.Itoa(r.Ref.Block), string(r.Ref.Status), strconv.FormatBool(used), strconv.FormatBool(sat), strconv.FormatBool(cl), ""}
			for _, k := range csvMetrics {
				v, ok := r.Metrics[k]
				if ok {
					row = append(row, fmtFloat(v))
				} else {
					row = append(row, "")
				}
			}
			for range csvSpread {
				row = append(row, "", "")
			}
			if err := w.Write(red(row)); err != nil {
				return nil, fmt.Errorf("export: tables.csv: %w", err)
			}
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
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

// classCSVMetrics are the class and per-instance columns of tables.csv.
func classCSVMetrics() []string {
	var out []string
	for _, n := range results.ClassNames {
		p := results.ClassMetric(n, "")
		out = append(out, p+"requests", p+"completed", p+"share", p+"input_p50", p+"failed", p+"fail_rate", p+"failed_input_p50", p+"median_ttft_ms", p+"p90_ttft_ms", p+"p90_tpot_ms", p+"median_e2el_ms")
	}
	return append(out, instanceCSVMetrics...)
}
