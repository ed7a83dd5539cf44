package results

import (
	"github.com/mbench/mbench/stats"
	"math"
	"slices"
	"strings"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
)

// DefaultClassBounds are seed 003's request classes by new (uncached) prompt
// tokens (§3.5): WARM below 5k, MEDIUM below 20k, HEAVY below 50k, HEAVY+
// above.
var DefaultClassBounds = [3]int{5000, 20000, 50000}

// ClassNames are the classes in order, as reports print them.
var ClassNames = [4]string{"WARM", "MEDIUM", "HEAVY", "HEAVY+"}

// Class bases: what a request's class is measured on.
const (
	// ClassByRouterNewTokens: the router's estimate of the request's
	// uncached tokens on the instance that prefilled it (routing.jsonl's
	// new_tokens_est), as seed 003's proxy classifies.
	ClassByRouterNewTokens = "router_new_tokens"
	// ClassByInputTokens: the whole prompt, when no router estimated more.
	ClassByInputTokens = "input_tokens"
)

// ClassSummary is a run's latency by request class.
type ClassSummary struct {
	Basis   string       `json:"basis"`
	Bounds  [3]int       `json:"bounds"`
	Classes []ClassStats `json:"by_class"`
}

// ClassStats is one class of a run's completed measured requests.
type ClassStats struct {
	Class        string   `json:"class"`
	Completed    int      `json:"completed"`
	Share        float64  `json:"share"` // of the run's completed requests
	InputP50     *float64 `json:"input_tokens_p50"`
	MedianTTFTMs *float64 `json:"median_ttft_ms"`
	P90TTFTMs    *float64 `json:"p90_ttft_ms"`
	MedianTPOTMs *float64 `json:"median_tpot_ms"`
	P90TPOTMs    *float64 `json:"p90_tpot_ms"`
	MedianE2ELMs *float64 `json:"median_e2el_ms"`
	P90E2ELMs    *float64 `json:"p90_e2el_ms"`
}

// classIndex returns the class of n tokens under bounds.
func classIndex(n int, b [3]int) int {
	for i, x := range b {
		if n < x {
			return i
		}
	}
	return 3
}

// SummarizeClasses splits the completed measured records into classes by
// their new tokens — newTokens[id] where given (the router's estimate), else
// their input tokens — and gives each class its TTFT, TPOT and E2EL
// (defined as SummarizeRun defines them). Zero bounds are
// DefaultClassBounds.
func SummarizeClasses(recs []Record, newTokens map[int]int, bounds [3]int) *ClassSummary {
	if bounds == [3]int{} {
		bounds = DefaultClassBounds
	}
	cs := &ClassSummary{Basis: ClassByInputTokens, Bounds: bounds}
	if len(newTokens) > 0 {
		cs.Basis = ClassByRouterNewTokens
	}
	var in, ttft, tpot, e2el [4][]float64
	var n [4]int
	total := 0
	for i := range recs {
		r := &recs[i]
		if r.Phase != openloop.PhaseMeasure || r.Status != openloop.StatusOK {
			continue
		}
		tok, ok := newTokens[r.ID]
		if !ok {
			tok = r.InputTokens
		}
		c := classIndex(tok, bounds)
		n[c]++
		total++
		in[c] = append(in[c], float64(r.InputTokens))
		if r.FirstTokenNs <= 0 || r.SentNs <= 0 {
			continue
		}
		t := float64(r.FirstTokenNs-r.SentNs) / 1e6
		ttft[c] = append(ttft[c], t)
		if r.LastTokenNs <= 0 {
			continue
		}
		e := float64(r.LastTokenNs-r.SentNs) / 1e6
		e2el[c] = append(e2el[c], e)
		if r.OutputTokens > 1 {
			tpot[c] = append(tpot[c], (e-t)/float64(r.OutputTokens-1))
		}
	}
	for c := range 4 {
		st := ClassStats{Class: ClassNames[c], Completed: n[c]}
		if total > 0 {
			st.Share = float64(n[c]) / float64(total)
		}
		st.InputP50, _ = pct50and90(in[c])
		st.MedianTTFTMs, st.P90TTFTMs = pct50and90(ttft[c])
		st.MedianTPOTMs, st.P90TPOTMs = pct50and90(tpot[c])
		st.MedianE2ELMs, st.P90E2ELMs = pct50and90(e2el[c])
		cs.Classes = append(cs.Classes, st)
	}
	return cs
}

// pct50and90 returns the median and p90 of xs (sorted in place), nil when
// empty.
func pct50and90(xs []float64) (*float64, *float64) {
	if len(xs) == 0 {
		return nil, nil
	}
	slices.Sort(xs)
	return ptr(stats.PercentileSorted(xs, 50)), ptr(stats.PercentileSorted(xs, 90))
}

// InstanceCaches is a run's prefix cache per instance, and how much the
// instances differ (seed 003 §3.2: the spread of APC across instances, std
// 7 pp with elastic offload vs 33 pp without, was a key finding).
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
	var hit, ext []float64
	for _, t := range targets {
		c := names.Summarize(of(before, t), of(after, t), nil)
		in := InstanceCache{Target: t, Queries: c.Queries, Hits: c.Hits,
			ExternalQueries: c.ExternalQueries, ExternalHits: c.ExternalHits}
		if c.HitRateValid {
			in.HitRate = ptr(c.HitRate)
			hit = append(hit, c.HitRate)
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
	}
	if len(ext) > 0 {
		ic.ExternalHitRateMean, ic.ExternalHitRateStd = ptr(stats.Mean(ext)), ptr(stats.PopStd(ext))
	}
	return ic
}

// classKey is a class name as a metric key part: WARM → warm, HEAVY+ →
// heavy_plus.
func classKey(name string) string {
	return strings.ReplaceAll(strings.ToLower(name), "+", "_plus")
}

// addClassMetrics flattens a run's class and per-instance figures into its
// metrics: class_<c>_{median,p90}_{ttft,tpot,e2el}_ms, class_<c>_share, and
// prefix_cache_hit_rate_{mean,std,min,max}_inst,
// external_hit_rate_{mean,std}_inst.
func addClassMetrics(s *RunSummary, out map[string]float64) {
	put := func(k string, v *float64) {
		if v != nil && !math.IsNaN(*v) {
			out[k] = *v
		}
	}
	if c := s.Classes; c != nil {
		for _, st := range c.Classes {
			p := "class_" + classKey(st.Class) + "_"
			out[p+"share"] = st.Share
			put(p+"median_ttft_ms", st.MedianTTFTMs)
			put(p+"p90_ttft_ms", st.P90TTFTMs)
			put(p+"median_tpot_ms", st.MedianTPOTMs)
			put(p+"p90_tpot_ms", st.P90TPOTMs)
			put(p+"median_e2el_ms", st.MedianE2ELMs)
			put(p+"p90_e2el_ms", st.P90E2ELMs)
		}
	}
	if ic := s.Instances; ic != nil {
		put("prefix_cache_hit_rate_mean_inst", ic.HitRateMean)
		put("prefix_cache_hit_rate_std_inst", ic.HitRateStd)
		put("prefix_cache_hit_rate_min_inst", ic.HitRateMin)
		put("prefix_cache_hit_rate_max_inst", ic.HitRateMax)
		put("external_hit_rate_mean_inst", ic.ExternalHitRateMean)
		put("external_hit_rate_std_inst", ic.ExternalHitRateStd)
	}
}

// classCSVMetrics are the class and per-instance columns of tables.csv.
func classCSVMetrics() []string {
	var out []string
	for _, n := range ClassNames {
		p := "class_" + classKey(n) + "_"
		out = append(out, p+"share", p+"median_ttft_ms", p+"p90_ttft_ms", p+"p90_tpot_ms", p+"median_e2el_ms")
	}
	return append(out, "prefix_cache_hit_rate_mean_inst", "prefix_cache_hit_rate_std_inst",
		"prefix_cache_hit_rate_min_inst", "prefix_cache_hit_rate_max_inst",
		"external_hit_rate_mean_inst", "external_hit_rate_std_inst")
}
