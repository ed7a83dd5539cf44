package results

import (
	"fmt"
	"strings"
)

// renderPrefixCache writes the prefix cache by instance (InstanceCaches):
// per cell the pooled rate and the spread across instances, then per
// instance its prefix, external (KV connector) and effective hit rates. One
// line when no run has /metrics figures or every hit rate is zero.
func renderPrefixCache(b *strings.Builder, v *reportView) {
	ordered := v.ordered
	if !anyCellHas(ordered, "prefix_cache_hit_rate") {
		collapsed(b, "Prefix cache by instance", "no run has prefix-cache figures from /metrics.")
		return
	}
	if allZero(ordered, "prefix_cache_hit_rate", "prefix_cache_hit_rate_max_inst", "external_hit_rate_mean_inst") {
		collapsed(b, "Prefix cache by instance", "the hit rate is 0.0%% in every run of every cell and on every instance (engine cache and any KV connector's): no measured prompt reused a cached prefix.")
		return
	}
	b.WriteString("## Prefix cache by instance\n\n")
	b.WriteString("Hit rates from each instance's /metrics deltas over the measured window: prefix = the engine's own cache, external = a KV connector's " +
		"(tokens received from another instance), effective = prefix + external (the prompt tokens the instance did not compute). " +
		"Pooled = all instances' hits over all their queries; mean, std (population) and range are across instances. Means over runs.\n\n")
	b.WriteString("| Config | Shape | Rate | Pooled | Mean | Std | Min | Max | External mean | Effective mean | Effective std |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range ordered {
		m := c.Sum.Metrics
		fmt.Fprintf(b, "| %s | %s | %g | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.Info.Config, c.Info.Shape, c.Info.Rate,
			pctOf(m, "prefix_cache_hit_rate"), pctOf(m, "prefix_cache_hit_rate_mean_inst"), ppOf(m, "prefix_cache_hit_rate_std_inst"),
			pctOf(m, "prefix_cache_hit_rate_min_inst"), pctOf(m, "prefix_cache_hit_rate_max_inst"),
			pctOf(m, "external_hit_rate_mean_inst"), pctOf(m, "effective_hit_rate_mean_inst"), ppOf(m, "effective_hit_rate_std_inst"))
	}
	b.WriteString("\n| Config | Shape | Rate | Instance | Prefix | External | Effective |\n|---|---|---|---|---|---|---|\n")
	for _, c := range ordered {
		m := c.Sum.Metrics
		for k, target := range instanceTargets(c) {
			if !hasMetric(m, instKey(k, "prefix_hit_rate")) && !hasMetric(m, instKey(k, "external_hit_rate")) {
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %g | %d (%s) | %s | %s | %s |\n", c.Info.Config, c.Info.Shape, c.Info.Rate, k, target,
				pctOf(m, instKey(k, "prefix_hit_rate")), pctOf(m, instKey(k, "external_hit_rate")), pctOf(m, instKey(k, "effective_hit_rate")))
		}
	}
	b.WriteString("\n")
}

// renderGPUUtil writes GPU utilization by GPU: per cell
// the mean over GPUs of each GPU's mean util, the lowest and highest GPU,
// and the imbalance max/min; then each GPU. One line without GPU samples.
func renderGPUUtil(b *strings.Builder, v *reportView) {
	ordered := v.ordered
	if !anyCellHas(ordered, "gpu_util_mean") {
		collapsed(b, "GPU utilization by GPU", "no run has GPU samples (NVML): utilization was not measured.")
		return
	}
	b.WriteString("## GPU utilization by GPU\n\n")
	b.WriteString("Each GPU's mean util_gpu over the run's window (NVML); mean, min and max are across the run's GPUs, imbalance = max/min " +
		"(lower utilization can mean faster requests, not waste). Means over runs, in %.\n\n")
	b.WriteString("| Config | Shape | Rate | Mean | Min | Max | Imbalance |\n|---|---|---|---|---|---|---|\n")
	for _, c := range ordered {
		m := c.Sum.Metrics
		if !hasMetric(m, "gpu_util_mean") {
			continue
		}
		imb := "—"
		if hasMetric(m, "gpu_util_imbalance") {
			imb = fmtNum(*m["gpu_util_imbalance"].Mean) + "×"
		}
		fmt.Fprintf(b, "| %s | %s | %g | %s | %s | %s | %s |\n", c.Info.Config, c.Info.Shape, c.Info.Rate,
			meanOrDash(m, "gpu_util_mean"), meanOrDash(m, "gpu_util_min_gpu"), meanOrDash(m, "gpu_util_max_gpu"), imb)
	}
	b.WriteString("\n| Config | Shape | Rate | GPU | Util mean |\n|---|---|---|---|---|\n")
	for _, c := range ordered {
		for k, g := range cellGPUs(c) {
			if !hasMetric(c.Sum.Metrics, gpuKey(k)) {
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %g | %s | %s |\n", c.Info.Config, c.Info.Shape, c.Info.Rate, g, meanOrDash(c.Sum.Metrics, gpuKey(k)))
		}
	}
	b.WriteString("\n")
}

// instanceTargets are the instances of a cell's first run with them, in
// scrape order (the order of the inst<k> metrics).
func instanceTargets(c *cellData) []string {
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
func cellGPUs(c *cellData) []string {
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
func pctOf(m map[string]MetricStats, k string) string {
	if v, ok := m[k]; ok && v.Mean != nil {
		return fmtPct(v.Mean)
	}
	return "—"
}

func ppOf(m map[string]MetricStats, k string) string {
	if v, ok := m[k]; ok && v.Mean != nil {
		return fmt.Sprintf("%.1f pp", 100**v.Mean)
	}
	return "—"
}
