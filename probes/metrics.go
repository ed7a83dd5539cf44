package probes

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mbench/mbench/openloop"
)

// ParseMetrics parses the Prometheus text exposition format (vLLM's
// /metrics; names may contain ':' and may be quoted UTF-8, hence
// prometheus/common/expfmt's parser with UTF-8 validation) and sums each
// sample name over its label sets. Names are the exposition names: a
// counter sample "vllm:prefix_cache_hits_total" is keyed so; histograms and
// summaries give "<name>_sum" and "<name>_count" (buckets and quantiles are
// dropped), "_created" timestamps and non-finite values are dropped. A
// malformed text is an error naming the line.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics text: %w", err)
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
				return nil, fmt.Errorf("metrics text: metric %s: unsupported type %v", name, mf.GetType())
			}
		}
	}
	return out, nil
}

// Scrape is one scrape of one target: a metrics.jsonl line.
type Scrape struct {
	TsUs   int64              `json:"ts_us"` // wall clock µs; the round's start for a Scraper
	Target string             `json:"target"`
	Phase  string             `json:"phase,omitempty"` // before | during | after
	Values map[string]float64 `json:"values"`
	Err    string             `json:"error,omitempty"` // the scrape failed; Values is empty
}

// MetricsURL returns target's /metrics URL: a base URL without a path gets
// "/metrics"; a URL with a path is used as is.
func MetricsURL(target string) string {
	u, err := url.Parse(target)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return target
	}
	u.Path = "/metrics"
	return u.String()
}

// maxMetricsBody caps a /metrics response (vLLM's is ~100 KB).
const maxMetricsBody = 64 << 20

// ScrapeMetrics GETs url (a /metrics URL) and parses it. Scrape.TsUs is the
// time of the request.
func ScrapeMetrics(ctx context.Context, c *http.Client, url string) (Scrape, error) {
	shown := openloop.RedactUserinfo(url) // a target may carry credentials; records and messages do not
	s := Scrape{TsUs: time.Now().UnixMicro(), Target: shown}
	c = cmp.Or(c, http.DefaultClient)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return s, fmt.Errorf("scrape %s: %w", shown, openloop.RedactError(err))
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		return s, fmt.Errorf("scrape %s: %w", shown, openloop.RedactError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return s, fmt.Errorf("scrape %s: HTTP %d: %s", shown, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	v, err := ParseMetrics(io.LimitReader(resp.Body, maxMetricsBody))
	if err != nil {
		return s, fmt.Errorf("scrape %s: %w", shown, openloop.RedactError(err))
	}
	s.Values = v
	return s, nil
}
