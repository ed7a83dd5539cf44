package report

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"strconv"

	"github.com/mbench/mbench/results"
)

// instanceCSVMetrics are the per-instance and per-GPU aggregate columns of
// tables.csv (the rows per instance and GPU are instances.csv's).
var instanceCSVMetrics = keys(results.InstanceAggregates...)

// instancesHeader are the columns of instances.csv.
var instancesHeader = []string{"level", "cell", "config", "shape", "rate", "block", "kind", "index", "name",
	"prefix_hit_rate", "external_hit_rate", "effective_hit_rate", "gpu_util_mean"}

// renderInstancesCSV writes instances.csv: per cell (level "cell": means
// over its used runs) and per run (level "run"), a row per instance (kind
// "instance": its hit rates) and per GPU (kind "gpu": its mean util), in the
// order the run scraped and sampled them.
func renderInstancesCSV(a *results.Analysis, redact func(string) string) ([]byte, error) {
	rows := [][]string{instancesHeader}
	opt := func(m map[string]results.MetricStats, k string) string { return optFloat(m[k].Mean) }
	for _, c := range a.Ordered {
		head := []string{c.Info.ID, c.Info.Config, c.Info.Shape, fmtFloat(c.Info.Rate)}
		for k, t := range instanceTargets(c) {
			rows = append(rows, append(append([]string{"cell"}, head...), "", "instance", strconv.Itoa(k), t,
				opt(c.Sum.Metrics, results.InstanceMetric(k, "prefix_hit_rate")), opt(c.Sum.Metrics, results.InstanceMetric(k, "external_hit_rate")),
				opt(c.Sum.Metrics, results.InstanceMetric(k, "effective_hit_rate")), ""))
		}
		for k, g := range cellGPUs(c) {
			rows = append(rows, append(append([]string{"cell"}, head...), "", "gpu", strconv.Itoa(k), g, "", "", "", opt(c.Sum.Metrics, results.GPUUtilMetric(k))))
		}
		for _, r := range c.Runs {
			if r.Sum == nil {
				continue
			}
			blk := strconv.Itoa(r.Ref.Block)
			if ic := r.Sum.Instances; ic != nil {
				for k, in := range ic.Instances {
					rows = append(rows, append(append([]string{"run"}, head...), blk, "instance", strconv.Itoa(k), in.Target,
						runFloat(r.Metrics, results.InstanceMetric(k, "prefix_hit_rate")), runFloat(r.Metrics, results.InstanceMetric(k, "external_hit_rate")),
						runFloat(r.Metrics, results.InstanceMetric(k, "effective_hit_rate")), ""))
				}
			}
			if g := r.Sum.GPU; g != nil && g.Available {
				for k, p := range g.PerGPU {
					rows = append(rows, append(append([]string{"run"}, head...), blk, "gpu", strconv.Itoa(k), fmt.Sprintf("%s:%d", p.Host, p.GPU),
						"", "", "", runFloat(r.Metrics, results.GPUUtilMetric(k))))
				}
			}
		}
	}
	for _, row := range rows {
		for i := range row {
			row[i] = redact(row[i])
		}
	}
	var buf bytes.Buffer
	if err := csv.NewWriter(&buf).WriteAll(rows); err != nil {
		return nil, fmt.Errorf("export: instances.csv: %w", err)
	}
	return buf.Bytes(), nil
}
