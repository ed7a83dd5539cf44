package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

func readTestdata(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func TestParseMetricsVLLM(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(readTestdata(t, "vllm_metrics.txt")))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"vllm:num_requests_running":                12 + 9, // summed over engines
		"vllm:num_requests_waiting":                3,
		"vllm:prefix_cache_queries_total":          1228800 + 983040,
		"vllm:prefix_cache_hits_total":             614400 + 393216,
		"vllm:external_prefix_cache_queries_total": 409600,
		"vllm:external_prefix_cache_hits_total":    131072,
		"vllm:num_preemptions_total":               5,
		"vllm:request_success_total":               540, // over finished_reason
		"vllm:time_to_first_token_seconds_count":   300,
		"vllm:time_to_first_token_seconds_sum":     134.7,
		"vllm:iteration_tokens_total_count":        5000,
		"vllm:cache_config_info":                   1,
		"python_gc_objects_collected_total":        12873 + 2412 + 301,
		"process_resident_memory_bytes":            2147483648,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || !closeTo(got, v, 1e-12) {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for k := range m {
		if strings.HasSuffix(k, "_bucket") || strings.HasSuffix(k, "_created") {
			t.Errorf("%s should be dropped", k)
		}
	}
}

func TestParseMetricsErrors(t *testing.T) {
	for _, tc := range []struct{ text, line string }{
		{"a 1\nb{x=\"1\" 2\n", "line 2"},
		{"# TYPE a counter\n# TYPE a gauge\n", "line 2"},
		{"# TYPE a countr\n", "line 1"},
		{"a 1\n\nb notanumber\n", "line 3"},
		{"a{x=1} 1\n", "line 1"},
		{"9a 1\n", "line 1"},
		{"a 1 2 3\n", "line 1"},
	} {
		_, err := ParseMetrics(strings.NewReader(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.line) {
			t.Errorf("%q: error %v, want one naming %s", tc.text, err, tc.line)
		}
	}
	// The UTF-8 extension: a quoted name inside the braces, timestamps, NaN.
	m, err := ParseMetrics(strings.NewReader("{\"my.metric\",le=\"x\"} 2 1700000000000\nvllm:x{a=\"\\\"q\\\\\"} 3\nn NaN\n"))
	if err != nil || m["my.metric"] != 2 || m["vllm:x"] != 3 || len(m) != 2 {
		t.Fatalf("%v %v", m, err)
	}
}

func scrapeText(hits, queries, running float64) string {
	return strings.NewReplacer("HITS", ftoa(hits), "QUERIES", ftoa(queries), "RUN", ftoa(running)).Replace(
		"# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{engine=\"0\"} HITS\n" +
			"# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{engine=\"0\"} QUERIES\n" +
			"vllm:num_requests_running{engine=\"0\"} RUN\nvllm:num_requests_waiting{engine=\"0\"} 1\n")
}

func TestScraperAndSummary(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		k := float64(n.Add(1)) // 1 before, 2..4 during, 5 after
		w.Write([]byte(scrapeText(100*k, 1000*k, k)))
	}))
	defer srv.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer bad.Close()

	// Each round's lines reach the sink after its scrapes were read, so
	// the test waits on the write itself: a round whose handler ran but
	// whose response was still being read when ctx ended is dropped.
	sink := &syncBuffer{wrote: make(chan struct{}, 8)}
	clock := newFakeClock(false)
	sc := &Scraper{Targets: []string{srv.URL}, Clock: clock, Sink: sink}
	ctx := context.Background()
	before, err := sc.Round(ctx, PhaseBefore)
	if err != nil || before[0].Err != "" {
		t.Fatal(err, before)
	}
	<-sink.wrote
	dctx, cancel := context.WithCancel(ctx)
	done := make(chan []Scrape)
	go func() { d, _ := sc.Run(dctx); done <- d }()
	clock.waitTicker(1)
	for i := int64(0); i < 3; i++ {
		clock.Tick(1e9)
		<-sink.wrote // this round has been served, read and written
	}
	cancel()
	during := <-done
	after, _ := sc.Round(ctx, PhaseAfter)
	if len(during) != 3 {
		t.Fatalf("%d during scrapes, want 3", len(during))
	}
	// A second target that fails is noted, not fatal.
	badScrape, _ := (&Scraper{Targets: []string{bad.URL}}).Round(ctx, PhaseBefore)
	if !strings.Contains(badScrape[0].Err, "HTTP 500") {
		t.Errorf("bad target: %+v", badScrape[0])
	}
	cs := SummarizeMetrics(append(before, badScrape...), after, during)
	if cs.Targets != 1 || cs.Hits != 400 || cs.Queries != 4000 || !cs.HitRateValid || cs.HitRate != 0.1 {
		t.Errorf("summary %+v", cs)
	}
	if cs.Running.Mean != 3 || cs.Running.Max != 4 || cs.Waiting.Mean != 1 || cs.DuringRounds != 3 {
		t.Errorf("levels %+v %+v rounds %d", cs.Running, cs.Waiting, cs.DuringRounds)
	}
	lines, err := ReadScrapes(strings.NewReader(sink.String()))
	if err != nil || len(lines) != 5 || lines[0].Phase != PhaseBefore || lines[4].Phase != PhaseAfter {
		t.Fatalf("metrics.jsonl: %d lines, %v", len(lines), err)
	}
}

func TestSummarizeMetricsOldNamesAndReset(t *testing.T) {
	sc := func(tgt string, v map[string]float64) Scrape { return Scrape{Target: tgt, Values: v} }
	before := []Scrape{
		sc("a", map[string]float64{"vllm:gpu_prefix_cache_hits_total": 10, "vllm:gpu_prefix_cache_queries_total": 100, "vllm:num_preemptions_total": 7}),
		sc("b", map[string]float64{"vllm:prefix_cache_hits_total": 50, "vllm:prefix_cache_queries_total": 500,
			"vllm:external_prefix_cache_hits_total": 0, "vllm:external_prefix_cache_queries_total": 0}),
	}
	after := []Scrape{
		sc("a", map[string]float64{"vllm:gpu_prefix_cache_hits_total": 30, "vllm:gpu_prefix_cache_queries_total": 200, "vllm:num_preemptions_total": 2}),
		sc("b", map[string]float64{"vllm:prefix_cache_hits_total": 110, "vllm:prefix_cache_queries_total": 700,
			"vllm:external_prefix_cache_hits_total": 30, "vllm:external_prefix_cache_queries_total": 120}),
	}
	cs := SummarizeMetrics(before, after, nil)
	if cs.Hits != 80 || cs.Queries != 300 || !closeTo(cs.HitRate, 80.0/300, 1e-12) {
		t.Errorf("hits %v queries %v rate %v", cs.Hits, cs.Queries, cs.HitRate)
	}
	if !cs.ExternalValid || cs.ExternalHitRate != 0.25 || cs.Preemptions != 2 {
		t.Errorf("external %+v", cs)
	}
	notes := strings.Join(cs.Notes, "|")
	if !strings.Contains(notes, "old name") || !strings.Contains(notes, "backwards") {
		t.Errorf("notes %q", notes)
	}
	if empty := SummarizeMetrics(nil, nil, nil); empty.HitRateValid || empty.Targets != 0 {
		t.Errorf("empty %+v", empty)
	}
}

func TestMetricsURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000":         "http://127.0.0.1:8000/metrics",
		"http://127.0.0.1:8000/":        "http://127.0.0.1:8000/metrics",
		"http://127.0.0.1:9000/custom":  "http://127.0.0.1:9000/custom",
		"http://127.0.0.1:8000/metrics": "http://127.0.0.1:8000/metrics",
	} {
		if got := MetricsURL(in); got != want {
			t.Errorf("%s → %s, want %s", in, got, want)
		}
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// TestSummarizeMissesAndKVUsage: an engine that counts the prompt tokens it
// computed apart from those its cache held (Misses) has lookups = hits +
// misses; the KV-usage gauge is summed over targets per round like running
// and waiting, and absent when no scrape has it.
func TestSummarizeMissesAndKVUsage(t *testing.T) {
	names := MetricNames{Running: []string{"run"}, Waiting: []string{"wait"}, KVUsage: []string{"kv_new", "kv_old"},
		Hits: []string{"cached_total"}, Misses: []string{"computed_total"}}
	sc := func(tgt string, ts int64, v map[string]float64) Scrape {
		return Scrape{Target: tgt, TsUs: ts, Values: v}
	}
	before := []Scrape{sc("a", 0, map[string]float64{"cached_total": 10, "computed_total": 90}), sc("b", 0, map[string]float64{"cached_total": 0, "computed_total": 0})}
	after := []Scrape{sc("a", 9, map[string]float64{"cached_total": 70, "computed_total": 130}), sc("b", 9, map[string]float64{"cached_total": 20, "computed_total": 80})}
	during := []Scrape{
		sc("a", 1, map[string]float64{"run": 2, "wait": 1, "kv_new": 0.25}), sc("b", 1, map[string]float64{"run": 1, "kv_old": 0.5}),
		sc("a", 2, map[string]float64{"run": 4, "wait": 5, "kv_new": 0.75}), sc("b", 2, map[string]float64{"run": 0, "kv_old": 0.25}),
	}
	cs := names.Summarize(before, after, during)
	if cs.Hits != 80 || cs.Queries != 200 || !cs.HitRateValid || cs.HitRate != 0.4 {
		t.Errorf("hits %v queries %v rate %v valid %v, want 80 / (80 + 120)", cs.Hits, cs.Queries, cs.HitRate, cs.HitRateValid)
	}
	if cs.Running != (Level{Mean: 3.5, Max: 4}) || cs.Waiting != (Level{Mean: 3, Max: 5}) || cs.KVUsage == nil || *cs.KVUsage != (Level{Mean: 0.875, Max: 1}) {
		t.Errorf("running %+v waiting %+v kv %+v", cs.Running, cs.Waiting, cs.KVUsage)
	}
	names.KVUsage = nil
	if cs := names.Summarize(before, after, during); cs.KVUsage != nil {
		t.Errorf("kv usage %+v from an engine that exports none", cs.KVUsage)
	}
	// The vLLM names read vLLM's series and none of the above.
	if cs := SummarizeMetrics(before, after, during); cs.HitRateValid || cs.Running.Max != 0 || cs.KVUsage != nil {
		t.Errorf("vLLM names read another engine's series: %+v", cs)
	}
}

// TestSummarizeEngineTokenTime: the engine's own time per output token is
// the window's token-time delta over its token delta, summed over the
// targets (llama-server's counters, a target that restarted counted from
// 0); an engine without the counters, or a window with no token, has
// none; vLLM's renamed histogram is read under either name.
func TestSummarizeEngineTokenTime(t *testing.T) {
	names := MetricNames{TokenSeconds: []string{"llamacpp:tokens_predicted_seconds_total"}, Tokens: []string{"llamacpp:tokens_predicted_total"}}
	sc := func(tgt string, sec, tok float64) Scrape {
		return Scrape{Target: tgt, Values: map[string]float64{"llamacpp:tokens_predicted_seconds_total": sec, "llamacpp:tokens_predicted_total": tok}}
	}
	// a: 0.9 s over 300 tokens; b restarted: 0.3 s over 100 tokens from 0.
	cs := names.Summarize([]Scrape{sc("a", 1.5, 500), sc("b", 9, 900)}, []Scrape{sc("a", 2.4, 800), sc("b", 0.3, 100)}, nil)
	if cs.EngineTokenMs == nil || math.Abs(*cs.EngineTokenMs-3) > 1e-9 {
		t.Errorf("engine per-token time %v, want 1.2 s / 400 tokens = 3 ms", cs.EngineTokenMs)
	}
	if cs := names.Summarize([]Scrape{sc("a", 1.5, 500)}, []Scrape{sc("a", 1.5, 500)}, nil); cs.EngineTokenMs != nil {
		t.Errorf("no token in the window, yet %v ms", *cs.EngineTokenMs)
	}
	if cs := (MetricNames{}).Summarize([]Scrape{sc("a", 1.5, 500)}, []Scrape{sc("a", 2.4, 800)}, nil); cs.EngineTokenMs != nil {
		t.Errorf("an engine without token-time counters, yet %v ms", *cs.EngineTokenMs)
	}
	for _, name := range []string{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"} {
		v := func(sum, n float64) []Scrape {
			return []Scrape{{Target: "a", Values: map[string]float64{name + "_sum": sum, name + "_count": n}}}
		}
		if cs := SummarizeMetrics(v(1, 100), v(3, 300), nil); cs.EngineTokenMs == nil || math.Abs(*cs.EngineTokenMs-10) > 1e-9 {
			t.Errorf("%s: %v, want 2 s / 200 = 10 ms", name, cs.EngineTokenMs)
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
