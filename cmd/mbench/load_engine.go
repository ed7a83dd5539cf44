package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/mbench/mbench/engines"
	"github.com/mbench/mbench/probes"
)

// preflightResult is what the endpoint said before the run.
type preflightResult struct {
	simulated bool // mbench sim (owned_by "mbench-sim", or its X-Mbench-Simulated header)
}

// preflight asks the first target for its models: an endpoint that cannot
// be reached is an error (exit 1) that says so, before any request is
// recorded; with --ready-check-timeout-sec it is asked again until it
// answers 200 or the time is up.
func preflight(ctx context.Context, lr *loadRun) (preflightResult, error) {
	target := lr.cfg.Targets[0]
	deadline := time.Now().Add(lr.ready)
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/v1/models", nil)
		if err != nil {
			return preflightResult{}, usageError{fmt.Errorf("load: %s: %w", redactURL(target), err)}
		}
		for k, v := range lr.cfg.Request.Headers {
			req.Header.Set(k, v)
		}
		if k := lr.cfg.Request.APIKey; k != "" {
			req.Header.Set("Authorization", "Bearer "+k)
		}
		resp, err := client.Do(req)
		if err == nil {
			defer resp.Body.Close()
			var models struct {
				Data []struct {
					OwnedBy string `json:"owned_by"`
				} `json:"data"`
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			_ = json.Unmarshal(body, &models)
			sim := resp.Header.Get("X-Mbench-Simulated") != ""
			for _, m := range models.Data {
				sim = sim || m.OwnedBy == "mbench-sim"
			}
			if resp.StatusCode == http.StatusOK || time.Now().After(deadline) {
				return preflightResult{simulated: sim}, nil
			}
		}
		if ctx.Err() != nil {
			return preflightResult{}, fmt.Errorf("load: %w while waiting for %s", errLoadInterrupted, redactURL(target))
		}
		if err != nil && time.Now().After(deadline) {
			hint := "is the server running? (--base-url, or --host and --port)"
			if lr.ready == 0 {
				hint += "; --ready-check-timeout-sec N waits for one that is starting"
			}
			return preflightResult{}, fmt.Errorf("load: cannot connect to %s: %v: %s", redactURL(target), rootCause(err), hint)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// rootCause is the innermost error of a failed dial, without the URL that
// net/http repeats.
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// metricsScrape reads the endpoint's /metrics around the measured phase
// through the window a sweep's run uses (probes.Window: a round as it
// begins, one a second during it, one after); the engine is told by its
// series' names (the engines table's rows), and a target without /metrics
// leaves the summary without a prefix_cache section (win nil).
type metricsScrape struct {
	ctx context.Context
	win *probes.Window
}

// newMetricsScrape finds the endpoint's engine by one scrape of its
// /metrics; nothing is scraped when no row of the engines table names its
// series.
func newMetricsScrape(ctx context.Context, lr *loadRun, stderr io.Writer) *metricsScrape {
	m := &metricsScrape{ctx: ctx}
	scr := &probes.Scraper{Client: &http.Client{Timeout: 2 * time.Second}, Targets: lr.cfg.Targets, Interval: time.Second}
	sc, err := probes.ScrapeMetrics(ctx, scr.Client, probes.MetricsURL(lr.cfg.Targets[0]))
	if err != nil {
		fmt.Fprintf(stderr, "load: no engine figures: %s/metrics: %v\n", redactURL(lr.cfg.Targets[0]), err)
		return m
	}
	for _, k := range engines.Kinds() {
		p := engines.Of(k)
		if p.Simulated != lr.simulated {
			continue
		}
		for name := range sc.Values {
			if strings.HasPrefix(name, strings.SplitN(firstName(p.Metrics), ":", 2)[0]+":") {
				m.win = probes.NewWindow(ctx, scr, p.Metrics)
				return m
			}
		}
	}
	fmt.Fprintf(stderr, "load: no engine figures: %s/metrics names no series of vLLM or llama-server\n", redactURL(lr.cfg.Targets[0]))
	return m
}

// firstName is the first series name of an engine's row (its prefix names
// the engine: "vllm:", "llamacpp:").
func firstName(n probes.MetricNames) string {
	for _, l := range [][]string{n.Running, n.Waiting, n.Hits} {
		if len(l) > 0 {
			return l[0]
		}
	}
	return ""
}

// onPhase is the load generator's Config.OnPhase.
func (m *metricsScrape) onPhase(phase string) {
	if m.win != nil {
		m.win.OnPhase(m.ctx, phase)
	}
}

// summary ends the scrapes and summarizes the window; nil without one.
func (m *metricsScrape) summary() *probes.CacheSummary {
	if m.win == nil {
		return nil
	}
	_, _, s, opened, _ := m.win.Close(context.Background())
	if !opened {
		return nil
	}
	return &s
}
