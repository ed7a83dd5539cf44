package results

import (
	"bytes"
	"encoding/csv"
	"fmt"
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

// instanceCSVMetrics are the per-instance and per-GPU aggregate columns of
// tables.csv (the rows per instance and GPU are instances.csv's).
var instanceCSVMetrics = []string{"prefix_cache_hit_rate_mean_inst", "prefix_cache_hit_rate_std_inst",
	"prefix_cache_hit_rate_min_inst", "prefix_cache_hit_rate_max_inst",
	"external_hit_rate_mean_inst", "external_hit_rate_std_inst",
	"effective_hit_rate_mean_inst", "effective_hit_rate_std_inst", "effective_hit_rate_min_inst", "effective_hit_rate_max_inst",
	"gpu_util_min_gpu", "gpu_util_max_gpu", "gpu_util_imbalance"}

// instKey and gpuKey name the metrics of instance k (in the order the run
// scraped its targets) and of GPU k (in the order the run sampled them).
func instKey(k int, what string) string { return "inst" + strconv.Itoa(k) + "_" + what }
func gpuKey(k int) string               { return "gpu" + strconv.Itoa(k) + "_util_mean" }

// addInstanceMetrics flattens a run's per-instance caches and per-GPU
// utilization: the aggregates of instanceCSVMetrics, and per instance k
// inst<k>_{prefix,external,effective}_hit_rate, per GPU k gpu<k>_util_mean
// (the per-instance cache and per-GPU load of docs/routing.md).
func addInstanceMetrics(s *RunSummary, put func(string, *float64)) {
	if ic := s.Instances; ic != nil {
		put("prefix_cache_hit_rate_mean_inst", ic.HitRateMean)
		put("prefix_cache_hit_rate_std_inst", ic.HitRateStd)
		put("prefix_cache_hit_rate_min_inst", ic.HitRateMin)
		put("prefix_cache_hit_rate_max_inst", ic.HitRateMax)
		put("external_hit_rate_mean_inst", ic.ExternalHitRateMean)
		put("external_hit_rate_std_inst", ic.ExternalHitRateStd)
		put("effective_hit_rate_mean_inst", ic.EffectiveHitRateMean)
		put("effective_hit_rate_std_inst", ic.EffectiveHitRateStd)
		put("effective_hit_rate_min_inst", ic.EffectiveHitRateMin)
		put("effective_hit_rate_max_inst", ic.EffectiveHitRateMax)
		for k, in := range ic.Instances {
			put(instKey(k, "prefix_hit_rate"), in.HitRate)
			put(instKey(k, "external_hit_rate"), in.ExternalHitRate)
			put(instKey(k, "effective_hit_rate"), in.EffectiveHitRate)
		}
	}
	if g := s.GPU; g != nil && g.Available && len(g.PerGPU) > 0 {
		var means []float64
		for k, p := range g.PerGPU {
			put(gpuKey(k), ptr(p.UtilGPU.Mean))
			means = append(means, p.UtilGPU.Mean)
		}
		put("gpu_util_min_gpu", ptr(slices.Min(means)))
		put("gpu_util_max_gpu", ptr(slices.Max(means)))
		if g.Imbalance > 0 {
			put("gpu_util_imbalance", ptr(g.Imbalance))
		}
	}
}

// instancesHeader are the columns of instances.csv.
var instancesHeader = []string{"level", "cell", "config", "shape", "rate", "block", "kind", "index", "name",
	"prefix_hit_rate", "external_hit_rate", "effective_hit_rate", "gpu_util_mean"}

// renderInstancesCSV writes instances.csv: per cell (level "cell": means
// over its used runs) and per run (level "run"), a row per instance (kind
// "instance": its hit rates) and per GPU (kind "gpu": its mean util), in the
// order the run scraped and sampled them.
func renderInstancesCSV(a *Analysis, redact func(string) string) ([]byte, error) {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	rows := [][]string{instancesHeader}
	opt := func(m map[string]MetricStats, k string) string { return optFloat(m[k].Mean) }
	runOpt := func(m map[string]float64, k string) string {
		if v, ok := m[k]; ok {
			return fmtFloat(v)
		}
		return ""
	}
	for _, c := range a.Ordered {
		head := []string{c.Info.ID, c.Info.Config, c.Info.Shape, fmtFloat(c.Info.Rate)}
		for k, t := range instanceTargets(c) {
			rows = append(rows, append(append([]string{"cell"}, head...), "", "instance", strconv.Itoa(k), t,
				opt(c.Sum.Metrics, instKey(k, "prefix_hit_rate")), opt(c.Sum.Metrics, instKey(k, "external_hit_rate")),
				opt(c.Sum.Metrics, instKey(k, "effective_hit_rate")), ""))
		}
		for k, g := range cellGPUs(c) {
			rows = append(rows, append(append([]string{"cell"}, head...), "", "gpu", strconv.Itoa(k), g, "", "", "", opt(c.Sum.Metrics, gpuKey(k))))
		}
		for _, r := range c.Runs {
			if r.Sum == nil {
				continue
			}
			blk := strconv.Itoa(r.Ref.Block)
			if ic := r.Sum.Instances; ic != nil {
				for k, in := range ic.Instances {
					rows = append(rows, append(append([]string{"run"}, head...), blk, "instance", strconv.Itoa(k), in.Target,
						runOpt(r.Metrics, instKey(k, "prefix_hit_rate")), runOpt(r.Metrics, instKey(k, "external_hit_rate")),
						runOpt(r.Metrics, instKey(k, "effective_hit_rate")), ""))
				}
			}
			if g := r.Sum.GPU; g != nil && g.Available {
				for k, p := range g.PerGPU {
					rows = append(rows, append(append([]string{"run"}, head...), blk, "gpu", strconv.Itoa(k), fmt.Sprintf("%s:%d", p.Host, p.GPU),
						"", "", "", runOpt(r.Metrics, gpuKey(k))))
				}
			}
		}
	}
	for _, row := range rows {
		for i := range row {
			row[i] = redact(row[i])
		}
		if err := w.Write(row); err != nil {
			return nil, fmt.Errorf("export: instances.csv: %w", err)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return nil, fmt.Errorf("export: instances.csv: %w", err)
	}
	return buf.Bytes(), nil
}
