package probes

import (
	"fmt"
	"io"
	"math"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parseExposition sums the exposition's samples by name, with
// prometheus/common/expfmt's text parser (UTF-8 validation, since vLLM's
// names contain ':'). Counters and gauges keep their exposition names;
// histograms and summaries give <name>_sum and <name>_count (buckets and
// quantiles are dropped); "_created" timestamps and non-finite values are
// dropped.
func parseExposition(r io.Reader) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64)
	add := func(name string, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) || strings.HasSuffix(name, "_created") {
			return
		}
		out[name] += v
	}
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				add(name+"_sum", m.GetHistogram().GetSampleSum())
				add(name+"_count", float64(m.GetHistogram().GetSampleCount()))
			case dto.MetricType_SUMMARY:
				add(name+"_sum", m.GetSummary().GetSampleSum())
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
			default:
				return nil, fmt.Errorf("metric %s: unsupported type %v", name, mf.GetType())
			}
		}
	}
	return out, nil
}
