package probes

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/mbench/mbench/openloop"
)

// ParseMetrics parses the Prometheus text exposition format (vLLM's
// /metrics; names may contain ':' and may be quoted UTF-8) and sums each
// sample name over its label sets. Names are the exposition names: a
// counter sample "vllm:prefix_cache_hits_total" is keyed so; histograms and
// summaries give "<name>_sum" and "<name>_count" (buckets and quantiles are
// dropped), "_created" timestamps and non-finite values are dropped. A
// malformed text is an error naming the line.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	m, err := parseExposition(r)
	if err != nil {
		return nil, fmt.Errorf("metrics text: %w", err)
	}
	return m, nil
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
	return scrapeAt(ctx, c, url, SystemClock{})
}

func scrapeAt(ctx context.Context, c *http.Client, url string, clock Clock) (Scrape, error) {
	shown := openloop.RedactUserinfo(url) // a target may carry credentials; records and messages do not
	s := Scrape{TsUs: clock.Now().UnixMicro(), Target: shown}
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
