package results

import (
	"math"
	"slices"
	"strconv"

	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/stats"
)

// InstanceCaches is a run's prefix cache per instance, and how much the
// instances differ (the spread of the prefix cache hit rate across
// instances, std 7 pp with elastic offload vs 33 pp without, was a key
// finding of the agentic experiments; docs/routing.md).
type InstanceCaches struct {
	Instances []InstanceCache `json:"per_instance"`
	// Across the instances with a defined rate: mean, population standard
	// deviation, min and max of the prefix-cache hit rate (fractions).
	HitRateMean *float64 `json:"hit_rate_mean"`
	HitRateStd  *float64 `json:"hit_rate_std"`
	HitRateMin  *float64 `json:"hit_rate_min"`
	HitRateMax  *float64 `json:"hit_rate_max"`
	// The same for the external (KV connector) hit rate.
	ExternalHitRateMean *float64 `json:"external_hit_rate_mean"`
	ExternalHitRateStd  *float64 `json:"external_hit_rate_std"`
	// The same for the effective hit rate.
	EffectiveHitRateMean *float64 `json:"effective_hit_rate_mean"`
	EffectiveHitRateStd  *float64 `json:"effective_hit_rate_std"`
	EffectiveHitRateMin  *float64 `json:"effective_hit_rate_min"`
	EffectiveHitRateMax  *float64 `json:"effective_hit_rate_max"`
}

// InstanceCache is one instance's /metrics deltas over the window.
type InstanceCache struct {
	Target          string   `json:"target"`
	Queries         float64  `json:"queries"`
	Hits            float64  `json:"hits"`
	HitRate         *float64 `json:"hit_rate"`
	ExternalQueries float64  `json:"external_queries"`
	ExternalHits    float64  `json:"external_hits"`
	ExternalHitRate *float64 `json:"external_hit_rate"`
	// EffectiveHitRate is the prefix hit rate plus the external one (seed
	// 003 §3.2's "Effective": the share of prompt tokens the instance did
	// not compute, from its own cache or from another instance's KV);
	// the prefix rate alone without a KV connector.
	EffectiveHitRate *float64 `json:"effective_hit_rate"`
}

// SummarizeInstances gives each scraped target its own prefix-cache
// summary (names.Summarize over its scrapes alone) and the spread of the
// hit rates across targets. Targets are in order of first appearance.
func SummarizeInstances(names probes.MetricNames, before, after []probes.Scrape) *InstanceCaches {
	var targets []string
	for _, s := range append(slices.Clone(before), after...) {
		if !slices.Contains(targets, s.Target) {
			targets = append(targets, s.Target)
		}
	}
	if len(targets) == 0 {
		return nil
	}
	of := func(list []probes.Scrape, t string) []probes.Scrape {
		return slices.DeleteFunc(slices.Clone(list), func(s probes.Scrape) bool { return s.Target != t })
	}
	ic := &InstanceCaches{}
	var hit, ext, eff []float64
	for _, t := range targets {
		c := names.Summarize(of(before, t), of(after, t), nil)
		in := InstanceCache{Target: t, Queries: c.Queries, Hits: c.Hits,
			ExternalQueries: c.ExternalQueries, ExternalHits: c.ExternalHits}
		if c.HitRateValid {
			in.HitRate = ptr(c.HitRate)
			hit = append(hit, c.HitRate)
			e := c.HitRate
			if c.ExternalValid {
				e += c.ExternalHitRate
			}
			in.EffectiveHitRate = ptr(min(e, 1))
			eff = append(eff, *in.EffectiveHitRate)
		}
		if c.ExternalValid {
			in.ExternalHitRate = ptr(c.ExternalHitRate)
			ext = append(ext, c.ExternalHitRate)
		}
		ic.Instances = append(ic.Instances, in)
	}
	if len(hit) > 0 {
		ic.HitRateMean, ic.HitRateStd = ptr(stats.Mean(hit)), ptr(stats.PopStd(hit))
		ic.HitRateMin, ic.HitRateMax = ptr(slices.Min(hit)), ptr(slices.Max(hit))
		ic.EffectiveHitRateMean, ic.EffectiveHitRateStd = ptr(stats.Mean(eff)), ptr(stats.PopStd(eff))
		ic.EffectiveHitRateMin, ic.EffectiveHitRateMax = ptr(slices.Min(eff)), ptr(slices.Max(eff))
	}
	if len(ext) > 0 {
		ic.ExternalHitRateMean, ic.ExternalHitRateStd = ptr(stats.Mean(ext)), ptr(stats.PopStd(ext))
	}
	return ic
}

// InstanceMetric is the metric key of what (prefix_hit_rate,
// external_hit_rate, effective_hit_rate) for instance k, in the order the
// run scraped its targets.
func InstanceMetric(k int, what string) string { return "inst" + strconv.Itoa(k) + "_" + what }

// GPUUtilMetric is the metric key of GPU k's mean utilization, in the
// order the run sampled its GPUs.
func GPUUtilMetric(k int) string { return "gpu" + strconv.Itoa(k) + "_util_mean" }

// The aggregates across a run's instances and GPUs (the per-instance cache
// and per-GPU load of docs/routing.md).
var (
	HitRateMeanInst          = instances("prefix_cache_hit_rate_mean_inst", HigherIsBetter, func(c *InstanceCaches) *float64 { return c.HitRateMean })
	HitRateStdInst           = instances("prefix_cache_hit_rate_std_inst", Neutral, func(c *InstanceCaches) *float64 { return c.HitRateStd })
	HitRateMinInst           = instances("prefix_cache_hit_rate_min_inst", HigherIsBetter, func(c *InstanceCaches) *float64 { return c.HitRateMin })
	HitRateMaxInst           = instances("prefix_cache_hit_rate_max_inst", HigherIsBetter, func(c *InstanceCaches) *float64 { return c.HitRateMax })
	ExternalHitRateMeanInst  = instances("external_hit_rate_mean_inst", HigherIsBetter, func(c *InstanceCaches) *float64 { return c.ExternalHitRateMean })
	ExternalHitRateStdInst   = instances("external_hit_rate_std_inst", Neutral, func(c *InstanceCaches) *float64 { return c.ExternalHitRateStd })
	EffectiveHitRateMeanInst = instances("effective_hit_rate_mean_inst", HigherIsBetter, func(c *InstanceCaches) *float64 { return c.EffectiveHitRateMean })
	EffectiveHitRateStdInst  = instances("effective_hit_rate_std_inst", Neutral, func(c *InstanceCaches) *float64 { return c.EffectiveHitRateStd })
	EffectiveHitRateMinInst  = instances("effective_hit_rate_min_inst", HigherIsBetter, func(c *InstanceCaches) *float64 { return c.EffectiveHitRateMin })
	EffectiveHitRateMaxInst  = instances("effective_hit_rate_max_inst", HigherIsBetter, func(c *InstanceCaches) *float64 { return c.EffectiveHitRateMax })
	GPUUtilMinGPU            = gpus("gpu_util_min_gpu", UnitPercent, Neutral, func(g *GPUSummary, means []float64) float64 { return slices.Min(means) })
	GPUUtilMaxGPU            = gpus("gpu_util_max_gpu", UnitPercent, Neutral, func(g *GPUSummary, means []float64) float64 { return slices.Max(means) })
	GPUUtilImbalance         = gpus("gpu_util_imbalance", UnitNone, LowerIsBetter, func(g *GPUSummary, means []float64) float64 {
		if g.Imbalance > 0 {
			return g.Imbalance
		}
		return math.NaN() // undefined: a GPU with zero mean utilization
	})
)

// InstanceAggregates are the aggregates in tables.csv's order.
var InstanceAggregates = []Metric{HitRateMeanInst, HitRateStdInst, HitRateMinInst, HitRateMaxInst,
	ExternalHitRateMeanInst, ExternalHitRateStdInst,
	EffectiveHitRateMeanInst, EffectiveHitRateStdInst, EffectiveHitRateMinInst, EffectiveHitRateMaxInst,
	GPUUtilMinGPU, GPUUtilMaxGPU, GPUUtilImbalance}

// instances declares an aggregate of the run's instance caches (a share);
// a missing or NaN one is not a value.
func instances(key string, d Direction, f func(*InstanceCaches) *float64) Metric {
	return Metric{key, UnitShare, d, func(s *RunSummary) (float64, bool) {
		if s.Instances == nil {
			return 0, false
		}
		return finite(f(s.Instances))
	}}
}

// gpus declares an aggregate over the run's GPUs' mean utilizations.
func gpus(key string, u Unit, d Direction, f func(*GPUSummary, []float64) float64) Metric {
	return Metric{key, u, d, func(s *RunSummary) (float64, bool) {
		g := s.GPU
		if g == nil || !g.Available || len(g.PerGPU) == 0 {
			return 0, false
		}
		means := make([]float64, len(g.PerGPU))
		for k, p := range g.PerGPU {
			means[k] = p.UtilGPU.Mean
		}
		return finite(ptr(f(g, means)))
	}}
}

// finite is *v when v is set and not NaN.
func finite(v *float64) (float64, bool) {
	if v == nil || math.IsNaN(*v) {
		return 0, false
	}
	return *v, true
}

// instanceFigures are the figures of each instance, inst<k>_<figure>:
// shares, higher is better.
var instanceFigures = []string{"prefix_hit_rate", "external_hit_rate", "effective_hit_rate"}

// instanceRows puts a run's per-instance caches (inst<k>_<figure>) and
// per-GPU utilization (gpu<k>_util_mean).
func instanceRows(s *RunSummary, put func(string, *float64)) {
	if ic := s.Instances; ic != nil {
		for k, in := range ic.Instances {
			for i, v := range []*float64{in.HitRate, in.ExternalHitRate, in.EffectiveHitRate} {
				put(InstanceMetric(k, instanceFigures[i]), v)
			}
		}
	}
	if g := s.GPU; g != nil && g.Available && len(g.PerGPU) > 0 {
		for k, p := range g.PerGPU {
			put(GPUUtilMetric(k), ptr(p.UtilGPU.Mean))
		}
	}
}
