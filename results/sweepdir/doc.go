// Package sweepdir is the file side of the results: it reads what a sweep
// directory holds for the analysis (each run's summary_A.json, the
// requests the class comparisons pair, capacity.json) and the raw logs the
// report draws (engine_step.jsonl, gpu.jsonl), and writes summaries and
// exports atomically. Package results decides what the files mean;
// package report what is drawn from them.
package sweepdir
