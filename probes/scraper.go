package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Scrape phases.
const (
	PhaseBefore = "before"
	PhaseDuring = "during"
	PhaseAfter  = "after"
)

// Scraper scrapes every target's /metrics: one round before the measured
// window, one round every Interval during it, one round after. Every scrape
// becomes a metrics.jsonl line on Sink (when not nil). All scrapes of a round
// carry the round's start time, so rounds can be summed across targets.
type Scraper struct {
	Client   *http.Client  // nil: http.DefaultClient
	Targets  []string      // base URLs ("http://host:8000") or /metrics URLs
	Interval time.Duration // during the window; default 1 s
	Clock    Clock         // nil: system clock
	Sink     io.Writer     // metrics.jsonl; may be nil

	mu sync.Mutex // serializes Sink writes
}

// Round scrapes all targets once, concurrently. A failed scrape is kept
// with Err set (and no values); the error return is only for Sink writes.
func (s *Scraper) Round(ctx context.Context, phase string) ([]Scrape, error) {
	return s.round(ctx, phase, false)
}

// round is Round; with dropCut, scrapes that failed because ctx ended
// during the round are left out.
func (s *Scraper) round(ctx context.Context, phase string, dropCut bool) ([]Scrape, error) {
	clock := orSystem(s.Clock)
	ts := clock.Now().UnixMicro()
	out := make([]Scrape, len(s.Targets))
	var wg sync.WaitGroup
	for i, t := range s.Targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc, err := scrapeAt(ctx, s.Client, MetricsURL(t), clock)
			if err != nil {
				sc.Err = err.Error()
			}
			sc.TsUs, sc.Target, sc.Phase = ts, t, phase
			out[i] = sc
		}()
	}
	wg.Wait()
	if dropCut && ctx.Err() != nil {
		kept := out[:0]
		for _, sc := range out {
			if sc.Err == "" {
				kept = append(kept, sc)
			}
		}
		out = kept
	}
	if s.Sink == nil {
		return out, nil
	}
	var buf []byte
	for i := range out {
		if out[i].Values == nil {
			out[i].Values = map[string]float64{}
		}
		buf = appendJSONLine(buf, &out[i])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.Sink.Write(buf); err != nil {
		return out, fmt.Errorf("metrics.jsonl: %w", err)
	}
	return out, nil
}

// Run scrapes a round every Interval (the first one Interval after the
// start) until ctx is done, and returns the rounds' scrapes with phase
// "during". Scrapes cut short by ctx's end are dropped (not written).
func (s *Scraper) Run(ctx context.Context) ([]Scrape, error) {
	iv := s.Interval
	if iv <= 0 {
		iv = time.Second
	}
	t := orSystem(s.Clock).NewTicker(iv)
	defer t.Stop()
	var all []Scrape
	for {
		select {
		case <-ctx.Done():
			return all, nil
		case <-t.C():
		}
		r, err := s.round(ctx, PhaseDuring, true)
		all = append(all, r...)
		if err != nil {
			return all, err
		}
	}
}

// ReadScrapes reads metrics.jsonl; a bad line is an error naming it.
func ReadScrapes(r io.Reader) ([]Scrape, error) {
	dec := json.NewDecoder(r)
	var out []Scrape
	for n := 1; ; n++ {
		var s Scrape
		if err := dec.Decode(&s); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, fmt.Errorf("metrics.jsonl: record %d: %w", n, err)
		}
		out = append(out, s)
	}
}

// Level is the mean and max of a gauge over the window, summed across
// targets per scrape round.
type Level struct {
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// CacheSummary is the prefix_cache object of a run summary: deltas of
// vLLM's counters over the window, summed over all targets.
type CacheSummary struct {
	Targets int `json:"targets"` // targets with a usable before and after scrape
	// Prefix cache (APC): hits/queries in tokens.
	Queries      float64 `json:"queries"`
	Hits         float64 `json:"hits"`
	HitRate      float64 `json:"hit_rate"`
	HitRateValid bool    `json:"hit_rate_valid"` // false: no queries or metric absent
	// External (KV connector) prefix cache.
	ExternalQueries float64 `json:"external_queries"`
	ExternalHits    float64 `json:"external_hits"`
	ExternalHitRate float64 `json:"external_hit_rate"`
	ExternalValid   bool    `json:"external_hit_rate_valid"`
	Preemptions     float64 `json:"preemptions"`
	Running         Level   `json:"running"`
	Waiting         Level   `json:"waiting"`
	DuringRounds    int     `json:"during_rounds"`
	// Notes: targets without scrapes, counter resets (engine restarted),
	// old metric names in use.
	Notes []string `json:"notes,omitempty"`
}

// Metric names, current first, then older vLLM spellings.
var (
	hitNames      = []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"}
	queryNames    = []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"}
	extHitNames   = []string{"vllm:external_prefix_cache_hits_total", "vllm:external_prefix_cache_hits"}
	extQueryNames = []string{"vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_queries"}
	preemptNames  = []string{"vllm:num_preemptions_total", "vllm:num_preemptions"}
)

func lastOK(ss []Scrape, first bool) map[string]Scrape {
	m := map[string]Scrape{}
	for _, s := range ss {
		if s.Err != "" || s.Values == nil {
			continue
		}
		if _, seen := m[s.Target]; seen && first {
			continue
		}
		m[s.Target] = s
	}
	return m
}

// SummarizeMetrics computes the window's deltas from the last good
// "before" scrape and the first good "after" scrape of each target, and
// running/waiting levels from the "during" rounds.
func SummarizeMetrics(before, after []Scrape, during []Scrape) CacheSummary {
	var cs CacheSummary
	b, a := lastOK(before, false), lastOK(after, true)
	targets := make([]string, 0, len(b))
	for t := range b {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	var hitsSeen, extSeen bool
	for _, t := range targets {
		at, ok := a[t]
		if !ok {
			cs.Notes = append(cs.Notes, t+": no good after scrape")
			continue
		}
		bt := b[t]
		cs.Targets++
		delta := func(names []string, what string) (float64, bool) {
			for i, n := range names {
				bv, ok1 := bt.Values[n]
				av, ok2 := at.Values[n]
				if !ok1 || !ok2 {
					continue
				}
				if i > 0 && what != "" {
					cs.Notes = append(cs.Notes, fmt.Sprintf("%s: %s from old name %s", t, what, n))
				}
				if av < bv {
					cs.Notes = append(cs.Notes, fmt.Sprintf("%s: %s went backwards (engine restarted?): counted from 0", t, n))
					return av, true
				}
				return av - bv, true
			}
			return 0, false
		}
		// addPair adds the hits and queries deltas to *hits and *queries
		// when both counters were scraped, and marks them seen.
		addPair := func(hitN, queryN []string, what string, hits, queries *float64, seen *bool) {
			h, okH := delta(hitN, what)
			q, okQ := delta(queryN, "")
			if okH && okQ {
				*seen = true
				*hits += h
				*queries += q
			}
		}
		addPair(hitNames, queryNames, "prefix cache", &cs.Hits, &cs.Queries, &hitsSeen)
		addPair(extHitNames, extQueryNames, "", &cs.ExternalHits, &cs.ExternalQueries, &extSeen)
		p, _ := delta(preemptNames, "")
		cs.Preemptions += p
	}
	for t := range a {
		if _, ok := b[t]; !ok {
			cs.Notes = append(cs.Notes, t+": no good before scrape")
		}
	}
	if hitsSeen && cs.Queries > 0 {
		cs.HitRate, cs.HitRateValid = cs.Hits/cs.Queries, true
	}
	if extSeen && cs.ExternalQueries > 0 {
		cs.ExternalHitRate, cs.ExternalValid = cs.ExternalHits/cs.ExternalQueries, true
	}
	cs.Running, cs.Waiting, cs.DuringRounds = levels(during)
	sort.Strings(cs.Notes)
	return cs
}

// levels sums running/waiting across the targets of each round (rounds
// share TsUs) and takes mean and max over rounds.
func levels(during []Scrape) (run, wait Level, rounds int) {
	type acc struct{ r, w float64 }
	byTs := map[int64]*acc{}
	for _, s := range during {
		if s.Err != "" {
			continue
		}
		x := byTs[s.TsUs]
		if x == nil {
			x = &acc{}
			byTs[s.TsUs] = x
		}
		x.r += s.Values["vllm:num_requests_running"]
		x.w += s.Values["vllm:num_requests_waiting"]
	}
	for _, x := range byTs {
		run.Mean += x.r
		wait.Mean += x.w
		run.Max, wait.Max = max(run.Max, x.r), max(wait.Max, x.w)
	}
	if n := len(byTs); n > 0 {
		run.Mean /= float64(n)
		wait.Mean /= float64(n)
	}
	return run, wait, len(byTs)
}
