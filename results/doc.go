// Package results turns the raw output of benchmark runs into numbers a
// researcher can trust. It is the analysis, and only that: it reads and
// writes no file and formats no report (package report draws an analysis,
// package sweepdir reads and writes the files), in the manner of
// benchstat's pure benchmath.
//
// It owns:
//   - the per-run summary (summary_A.json's content), with field names that
//     follow `vllm bench serve`, plus the run's grading: saturation
//     (throughput ratio, abort, TTFT trend), decided here, and the load
//     generator's self-grading (send lag, achieved/scheduled send rate, a
//     Kolmogorov–Smirnov test of the sent gaps, client limitation), which is
//     openloop.SelfGrade's, copied and never recomputed differently;
//   - each run's verdict (Decide), the one rule of what counts as a result;
//   - the statistics of the method in docs/design.md ("Noise floor and
//     comparisons"): Student-t confidence intervals, coefficient of variation,
//     paired log-ratio comparisons with Holm correction, the two-stage spread
//     and the position-in-block effect, and the comparison's wording
//     ("+12.3% [+8.1, +16.6]", "within noise (±4.2%; could detect ±6.0%)", "n/a (1 block)");
//   - the capacity search's analysis (probes judged against their bounds,
//     brackets, paired capacity comparisons);
//   - the analysis of a sweep (Analyze): its cells and their summaries, the
//     comparisons with the baseline, the A/A noise floor, the per-class
//     comparisons, what every output is drawn from.
//
// It reads request records through package openloop and engine-step, GPU and
// cache summaries through package probes.
package results
