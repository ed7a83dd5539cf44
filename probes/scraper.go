package probes

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
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
	ts := orSystem(s.Clock).Now().UnixMicro()
	out := make([]Scrape, len(s.Targets))
	var wg sync.WaitGroup
	for i, t := range s.Targets {
		wg.Go(func() {
			sc, err := ScrapeMetrics(ctx, s.Client, MetricsURL(t))
			if err != nil {
				sc.Err = err.Error()
			}
			sc.TsUs, sc.Target, sc.Phase = ts, t, phase
			out[i] = sc
		})
	}
	wg.Wait()
	if dropCut && ctx.Err() != nil {
		out = slices.DeleteFunc(out, func(sc Scrape) bool { return sc.Err != "" })
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
	t := orSystem(s.Clock).NewTicker(orPositive(s.Interval, time.Second))
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

// Level is the mean and max of a gauge over the window, summed across
// targets per scrape round.
type Level struct {
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// CacheSummary is the prefix_cache object of a run summary: deltas of the
// engine's counters over the window, summed over all targets, and levels
// of its gauges (see MetricNames for which series each engine kind gives).
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
	// WaitingExported says the engine exports its queue (MetricNames.Waiting)
	// and the during-scrapes read it: Waiting is then the engine's own
	// word on whether requests waited, not a zero for want of a series.
	WaitingExported bool `json:"waiting_exported,omitempty"`
	// KVUsage is the KV-cache usage gauge (a fraction of the cache), nil
	// when the engine exports none.
	KVUsage *Level `json:"kv_usage,omitempty"`
	// EngineTokenMs is the engine's own time per output token over the
	// window, in ms: the delta of its token-time counter over the delta
	// of the tokens it timed (MetricNames.TokenSeconds, Tokens), summed
	// over the targets; nil where the engine exports neither or timed no
	// token.
	EngineTokenMs *float64 `json:"engine_token_ms,omitempty"`
	DuringRounds  int      `json:"during_rounds"`
	// Notes: targets without scrapes, counter resets (engine restarted),
	// old metric names in use.
	Notes []string `json:"notes,omitempty"`
}

// MetricNames names an engine's /metrics series for each quantity a run
// summary reads. Every list is tried in order (the current name first, then
// older spellings); an empty list means the engine exports no such series.
type MetricNames struct {
	Running []string // gauge: requests being processed
	Waiting []string // gauge: requests queued for a slot or a batch
	KVUsage []string // gauge: KV-cache usage as a fraction of the cache
	// Hits and Queries are prefix-cache counters in prompt tokens: tokens
	// found in the cache and tokens looked up.
	Hits, Queries []string
	// Misses, for an engine that counts the prompt tokens it computed
	// apart from those it took from the cache instead of counting lookups:
	// the lookups are then Hits + Misses. Used only when Queries is empty.
	Misses []string
	// ExternalHits and ExternalQueries count a KV connector's prefix
	// cache, in tokens.
	ExternalHits, ExternalQueries []string
	Preemptions                   []string // counter
	// TokenSeconds and Tokens count the engine's own time generating
	// output tokens, in seconds, and the tokens (or gaps) it timed; list
	// them in the same order, one engine version's pair at each index.
	TokenSeconds, Tokens []string
}

// VLLMMetrics are vLLM's names (vllm/v1/metrics/loggers.py), current first,
// then older spellings. mbench's simulated engine exports the same.
var VLLMMetrics = MetricNames{
	Running:         []string{"vllm:num_requests_running"},
	Waiting:         []string{"vllm:num_requests_waiting"},
	KVUsage:         []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
	Hits:            []string{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"},
	Queries:         []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"},
	ExternalHits:    []string{"vllm:external_prefix_cache_hits_total", "vllm:external_prefix_cache_hits"},
	ExternalQueries: []string{"vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_queries"},
	Preemptions:     []string{"vllm:num_preemptions_total", "vllm:num_preemptions"},
	// The engine's inter-token latency histogram (renamed in v0.11).
	TokenSeconds: []string{"vllm:inter_token_latency_seconds_sum", "vllm:time_per_output_token_seconds_sum"},
	Tokens:       []string{"vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count"},
}

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

// Summarize computes the window's deltas from the last good "before"
// scrape and the first good "after" scrape of each target, and the levels
// of running, waiting and KV usage from the "during" rounds.
func (n MetricNames) Summarize(before, after []Scrape, during []Scrape) CacheSummary {
	var cs CacheSummary
	b, a := lastOK(before, false), lastOK(after, true)
	targets := slices.Sorted(maps.Keys(b))
	var hitsSeen, extSeen bool
	var tokSeconds, tokCount float64
	for _, t := range targets {
		at, ok := a[t]
		if !ok {
			cs.Notes = append(cs.Notes, t+": no good after scrape")
			continue
		}
		d := counterDelta{target: t, before: b[t].Values, after: at.Values, notes: &cs.Notes}
		cs.Targets++
		// Without a queries counter, queries are hits + misses.
		misses := len(n.Queries) == 0 && len(n.Misses) > 0
		queries := n.Queries
		if misses {
			queries = n.Misses
		}
		if h, q, ok := d.pair(n.Hits, queries, "prefix cache"); ok {
			if misses {
				q += h
			}
			hitsSeen, cs.Hits, cs.Queries = true, cs.Hits+h, cs.Queries+q
		}
		if h, q, ok := d.pair(n.ExternalHits, n.ExternalQueries, ""); ok {
			extSeen, cs.ExternalHits, cs.ExternalQueries = true, cs.ExternalHits+h, cs.ExternalQueries+q
		}
		p, _ := d.of(n.Preemptions, "")
		cs.Preemptions += p
		if sec, tok, ok := d.pair(n.TokenSeconds, n.Tokens, ""); ok {
			tokSeconds += sec
			tokCount += tok
		}
	}
	if tokCount > 0 {
		cs.EngineTokenMs = new(1000 * tokSeconds / tokCount)
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
	cs.Running, _, cs.DuringRounds = levels(during, n.Running)
	cs.Waiting, cs.WaitingExported, _ = levels(during, n.Waiting)
	if kv, seen, _ := levels(during, n.KVUsage); seen {
		cs.KVUsage = &kv
	}
	sort.Strings(cs.Notes)
	return cs
}

// counterDelta reads one target's counters over a window.
type counterDelta struct {
	target        string
	before, after map[string]float64
	notes         *[]string
}

// of returns the growth of the first of names scraped both before and
// after. It notes a fallback to an old name (a later one in names) for
// what, if not empty, and a counter that went backwards (an engine
// restart: counted from 0).
func (d counterDelta) of(names []string, what string) (float64, bool) {
	for i, n := range names {
		bv, ok1 := d.before[n]
		av, ok2 := d.after[n]
		if !ok1 || !ok2 {
			continue
		}
		if i > 0 && what != "" {
			*d.notes = append(*d.notes, fmt.Sprintf("%s: %s from old name %s", d.target, what, n))
		}
		if av < bv {
			*d.notes = append(*d.notes, fmt.Sprintf("%s: %s went backwards (engine restarted?): counted from 0", d.target, n))
			return av, true
		}
		return av - bv, true
	}
	return 0, false
}

// pair returns the growths of two counters, ok when both were scraped.
func (d counterDelta) pair(first, second []string, what string) (f, s float64, ok bool) {
	f, okF := d.of(first, what)
	s, okS := d.of(second, "")
	return f, s, okF && okS
}

// levels sums a gauge (the first of names a scrape has) across the
// targets of each round (rounds share TsUs) and takes mean and max over
// rounds; seen says whether any scrape had the gauge.
func levels(during []Scrape, names []string) (l Level, seen bool, rounds int) {
	byTs := map[int64]float64{}
	for _, s := range during {
		if s.Err != "" {
			continue
		}
		v := byTs[s.TsUs]
		for _, name := range names {
			if x, ok := s.Values[name]; ok {
				v += x
				seen = true
				break
			}
		}
		byTs[s.TsUs] = v
	}
	for _, x := range byTs {
		l.Mean += x
		l.Max = max(l.Max, x)
	}
	if n := len(byTs); n > 0 {
		l.Mean /= float64(n)
	}
	return l, seen, len(byTs)
}

// SummarizeMetrics is VLLMMetrics.Summarize.
func SummarizeMetrics(before, after []Scrape, during []Scrape) CacheSummary {
	return VLLMMetrics.Summarize(before, after, during)
}
