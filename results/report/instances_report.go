package report

import (
	"fmt"

	"github.com/mbench/mbench/results"
)

// renderPrefixCache writes the prefix cache by instance, with each one's effective hit rate;
// one line when no run has /metrics figures or every hit rate is zero.
var renderPrefixCache = tableSection("Prefix cache by instance", prefixCacheTables)

// prefixCacheTables: per cell the pooled rate and the spread across
// instances, then per instance its prefix, external (KV connector) and
// effective hit rates.
func prefixCacheTables(v *reportView) ([]sectionTable, string) {
	ordered := v.ordered
	if !results.AnyCellHas(ordered, results.PrefixCacheHitRate.Key) {
		return nil, "no run has prefix-cache figures from /metrics."
	}
	if allZero(ordered, results.PrefixCacheHitRate.Key, results.HitRateMaxInst.Key, results.ExternalHitRateMeanInst.Key) {
		return nil, "the hit rate is 0.0% in every run of every cell and on every instance (engine cache and any KV connector's): no measured prompt reused a cached prefix."
	}
	agg := sectionTable{ID: "prefix-cache", Title: "Prefix cache by instance",
		Intro: "Hit rates from each instance's /metrics deltas over the measured window: prefix = the engine's own cache, external = a KV connector's " +
			"(tokens received from another instance), effective = prefix + external (the prompt tokens the instance did not compute). " +
			"Pooled = all instances' hits over all their queries; mean, std (population) and range are across instances. Means over runs.",
		Head: []string{"Config", "Shape", "Rate", "Pooled", "Mean", "Std", "Min", "Max", "External mean", "Effective mean", "Effective std"}}
	per := sectionTable{ID: "prefix-cache-instances", Head: []string{"Config", "Shape", "Rate", "Instance", "Prefix", "External", "Effective"}}
	for _, c := range ordered {
		m := c.Sum.Metrics
		agg.Rows = append(agg.Rows, []string{c.Info.Config, c.Info.Shape, fmtFloat(c.Info.Rate),
			pctOf(m, results.PrefixCacheHitRate.Key), pctOf(m, results.HitRateMeanInst.Key), ppOf(m, results.HitRateStdInst.Key),
			pctOf(m, results.HitRateMinInst.Key), pctOf(m, results.HitRateMaxInst.Key),
			pctOf(m, results.ExternalHitRateMeanInst.Key), pctOf(m, results.EffectiveHitRateMeanInst.Key), ppOf(m, results.EffectiveHitRateStdInst.Key)})
		for k, target := range instanceTargets(c) {
			if !hasMetric(m, results.InstanceMetric(k, "prefix_hit_rate")) && !hasMetric(m, results.InstanceMetric(k, "external_hit_rate")) {
				continue
			}
			per.Rows = append(per.Rows, []string{c.Info.Config, c.Info.Shape, fmtFloat(c.Info.Rate), fmt.Sprintf("%d (%s)", k, target),
				pctOf(m, results.InstanceMetric(k, "prefix_hit_rate")), pctOf(m, results.InstanceMetric(k, "external_hit_rate")), pctOf(m, results.InstanceMetric(k, "effective_hit_rate"))})
		}
	}
	return []sectionTable{agg, per}, ""
}

// renderGPUUtil writes GPU utilization by GPU, with the imbalance; one line
// without GPU samples.
var renderGPUUtil = tableSection("GPU utilization by GPU", gpuUtilTables)

// gpuUtilTables: per cell the mean over GPUs of each GPU's mean util, the
// lowest and highest GPU, and the imbalance max/min; then each GPU.
func gpuUtilTables(v *reportView) ([]sectionTable, string) {
	ordered := v.ordered
	if !results.AnyCellHas(ordered, results.GPUUtilMean.Key) {
		return nil, "no run has GPU samples (NVML): utilization was not measured."
	}
	agg := sectionTable{ID: "gpu-util", Title: "GPU utilization by GPU",
		Intro: "Each GPU's mean util_gpu over the run's window (NVML); mean, min and max are across the run's GPUs, imbalance = max/min " +
			"(lower utilization can mean faster requests, not waste). Means over runs, in %.",
		Head: []string{"Config", "Shape", "Rate", "Mean", "Min", "Max", "Imbalance"}}
	per := sectionTable{ID: "gpu-util-gpus", Head: []string{"Config", "Shape", "Rate", "GPU", "Util mean"}}
	for _, c := range ordered {
		m := c.Sum.Metrics
		if !hasMetric(m, results.GPUUtilMean.Key) {
			continue
		}
		imb := "—"
		if hasMetric(m, results.GPUUtilImbalance.Key) {
			imb = fmtNum(*m[results.GPUUtilImbalance.Key].Mean) + "×"
		}
		agg.Rows = append(agg.Rows, []string{c.Info.Config, c.Info.Shape, fmtFloat(c.Info.Rate),
			meanOrDash(m, results.GPUUtilMean.Key), meanOrDash(m, results.GPUUtilMinGPU.Key), meanOrDash(m, results.GPUUtilMaxGPU.Key), imb})
		for k, g := range cellGPUs(c) {
			if hasMetric(m, results.GPUUtilMetric(k)) {
				per.Rows = append(per.Rows, []string{c.Info.Config, c.Info.Shape, fmtFloat(c.Info.Rate), g, meanOrDash(m, results.GPUUtilMetric(k))})
			}
		}
	}
	return []sectionTable{agg, per}, ""
}

// instanceTargets are the instances of a cell's first run with them, in
// scrape order (the order of the inst<k> metrics).
func instanceTargets(c *results.Cell) []string {
	for _, r := range c.Runs {
		if r.Sum != nil && r.Sum.Instances != nil {
			var out []string
			for _, in := range r.Sum.Instances.Instances {
				out = append(out, in.Target)
			}
			return out
		}
	}
	return nil
}

// cellGPUs names the GPUs of a cell's first run with samples ("host:gpu"),
// in the order of the gpu<k> metrics.
func cellGPUs(c *results.Cell) []string {
	for _, r := range c.Runs {
		if r.Sum != nil && r.Sum.GPU != nil && len(r.Sum.GPU.PerGPU) > 0 {
			var out []string
			for _, g := range r.Sum.GPU.PerGPU {
				out = append(out, fmt.Sprintf("%s:%d", g.Host, g.GPU))
			}
			return out
		}
	}
	return nil
}

// pctOf is a fraction metric's mean in percent, or "—"; ppOf a spread of
// fractions in percentage points.
func pctOf(m map[string]results.MetricStats, k string) string {
	if v, ok := m[k]; ok && v.Mean != nil {
		return fmtPct(v.Mean)
	}
	return "—"
}

func ppOf(m map[string]results.MetricStats, k string) string {
	if v, ok := m[k]; ok && v.Mean != nil {
		return fmt.Sprintf("%.1f pp", 100**v.Mean)
	}
	return "—"
}
