package results

import (
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
)

// The formats results reads are owned by openloop (requests.jsonl) and probes
// (engine_step.jsonl, gpu.jsonl, /metrics). The aliases keep the rest of this
// package short; they are the same types.
type (
	// Record is one request as openloop writes it to requests.jsonl.
	Record = openloop.Record
	// StepStats summarizes engine_step.jsonl over a run's window.
	StepStats = probes.StepStats
	// GPUSummary summarizes every GPU sampled during a run.
	GPUSummary = probes.GPUSummary
	// CacheSummary is the prefix-cache activity of a run, from /metrics deltas.
	CacheSummary = probes.CacheSummary
	// GateRecord is the GPU gate's checks before a run.
	GateRecord = probes.GateRecord
)

// gpuUtilMean is the mean GPU utilisation (%) over all GPUs of a run.
func gpuUtilMean(g *GPUSummary) (float64, bool) {
	if g == nil || !g.Available || len(g.PerGPU) == 0 {
		return 0, false
	}
	var s float64
	for _, p := range g.PerGPU {
		s += p.UtilGPU.Mean
	}
	return s / float64(len(g.PerGPU)), true
}

// cacheHitRate is the prefix-cache hit rate of a run, when it is defined.
func cacheHitRate(c *CacheSummary) (float64, bool) {
	if c == nil || !c.HitRateValid {
		return 0, false
	}
	return c.HitRate, true
}
