// Package probes owns what mbench measures beside the load generator:
//
//   - the engine's per-step log (engine_step.jsonl): a streaming reader that
//     slices a run's window and summarizes every timer with exact
//     percentiles (SummarizeSteps), and the merge of vLLM worker-process
//     timings into the main log (MergeWorkerTimings);
//   - GPU and host samples: an NVML sampler (go-nvml) and a gopsutil host
//     sampler that stream gpu.jsonl / host.jsonl lines (Sampler), and their
//     per-run summary (SummarizeGPU);
//   - the GPU gate that waits, between runs, until GPU memory is back at its
//     idle level and the temperature is back within a band of the sweep's
//     baseline (Gate), curing the cold/warm ordering effect;
//   - vLLM's Prometheus /metrics: parsing (ParseMetrics, with
//     prometheus/common/expfmt's text parser), scraping before/during/after
//     a measured window
//     (Scraper, metrics.jsonl) and the prefix-cache, preemption and queue
//     summary (SummarizeMetrics), the engine's own per-token time among it;
//   - what shared a run's CPUs: two readings of a host's /proc through one
//     sh command line (ReadCPU), giving an engine's process-tree CPU, the
//     host's busy and stolen time and what else ran on the load
//     generator's cores (Contention), and mbench's own scheduling delay
//     from a ticker's lateness (SchedLag).
//
// The package imports nothing else of mbench; it owns the formats of
// gpu.jsonl, host.jsonl and metrics.jsonl and reads engine_step.jsonl.
//
// The step reader has three paths, all giving the same result (a fuzz
// target checks it against encoding/json): a template path for lines
// shaped like the previous one (word-at-a-time key compares and SWAR digit
// parsing, amd64/arm64), a general hand-rolled scanner, and encoding/json
// for anything unusual. Percentiles are exact for integer µs below 2^20
// (dense counts), and within 2^-11 relative error beyond 65536 distinct
// other values (log bins); memory is bounded by the value range, never by
// the file length.
//
// NVML is reached only through OpenNVML: after a failed nvml.Init no other
// NVML function may be called (with lazy symbol binding such a call kills the
// process), so OpenNVML returns an error and nil library instead.
package probes
