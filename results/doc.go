// Package results turns the raw output of benchmark runs into numbers a
// researcher can trust, and into the files they read.
//
// It owns:
//   - the per-run summary (summary_A.json in a run directory), with field names
//     that follow `vllm bench serve`, plus the run's grading: saturation
//     (throughput ratio, abort, TTFT trend), decided here, and the load
//     generator's self-grading (send lag, achieved/scheduled send rate, a
//     Kolmogorov–Smirnov test of the sent gaps, client limitation), which is
//     openloop.SelfGrade's, copied and never recomputed differently;
//   - the statistics of the method in docs/design.md ("Noise floor and
//     comparisons"): Student-t confidence intervals, coefficient of variation,
//     the stopping-rule check, paired log-ratio comparisons with Holm
//     correction and their wording ("+12.3% [+8.1, +16.6]", "within noise
//     (±4.2%)", "n/a (1 block)");
//   - the export of a sweep: cells/<id>/summary_A.json, report.md, tables.csv
//     and the plots under plots/.
//
// It reads request records through package openloop and engine-step, GPU and
// cache summaries through package probes; it imports nothing else of mbench.
package results
