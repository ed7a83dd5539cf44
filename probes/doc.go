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
//   - vLLM's Prometheus /metrics: parsing, scraping before/during/after a
//     measured window (Scraper, metrics.jsonl) and the prefix-cache,
//     preemption and queue summary (SummarizeMetrics).
//
// The package imports nothing else of mbench; it owns the formats of
// gpu.jsonl, host.jsonl and metrics.jsonl and reads engine_step.jsonl.
//
// NVML is reached only through OpenNVML: after a failed nvml.Init no other
// NVML function may be called (with lazy symbol binding such a call kills the
// process), so OpenNVML returns an error and nil library instead.
package probes
