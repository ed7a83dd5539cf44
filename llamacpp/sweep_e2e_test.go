package llamacpp_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/internal/longrun"
	"github.com/mbench/mbench/internal/porttest"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"go.yaml.in/yaml/v3"
)

// testMatrix is matrices/llamacpp.yaml (its configs: 4 slots, 1 slot, 4
// slots without the prompt cache) made to run here: the built llama-server
// and a test model, a reserved port block, and sizes held down for CI.
// edit changes the decoded matrix further.
func testMatrix(t *testing.T, server, model string, edit func(m map[string]any)) string {
	t.Helper()
	b, err := os.ReadFile("../matrices/llamacpp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	e := m["engine"].(map[string]any)
	cmd := e["command"].(string)
	if !strings.HasPrefix(cmd, "llama-server ") {
		t.Fatalf("matrices/llamacpp.yaml: engine.command %q does not start with llama-server", cmd)
	}
	e["command"] = server + strings.TrimPrefix(cmd, "llama-server")
	e["model"] = model
	e["port"], _ = strconv.Atoi(porttest.Base(t))
	// The shipped measure section, warm-up included (the metrics window
	// must hold none of it), with a drain long enough that a run on an
	// overloaded machine finishes late rather than cutting off the
	// requests the engine still serves.
	ms := m["measure"].(map[string]any)
	if ms["warmup_requests"] != 4 {
		t.Fatalf("matrices/llamacpp.yaml: measure.warmup_requests %v, want the 4 this test was written for", ms["warmup_requests"])
	}
	ms["min_completed"], ms["timeout"], ms["drain_timeout"] = 40, "60s", "2m"
	m["rates"] = []any{6, 16}
	m["repeat"] = map[string]any{"min": 2, "max": 2, "metric": "ttft_p90"}
	if edit != nil {
		edit(m)
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "llamacpp.yaml")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSweepAgainstLlamaServer runs matrices/llamacpp.yaml's three configs
// at 6 and 16 req/s for two blocks against real llama-servers and holds
// every run to what the engine says, with the shipped warm-up of 4
// requests: no request lost; the prefix cache's
// hits and lookups from its /metrics equal the sum of the responses'
// usage (cached_tokens over prompt tokens), recounted here from
// requests.jsonl; no hit with --no-cache-prompt, most of the shared
// prefixes hit with it on; one slot queues requests (requests_deferred)
// where four run several at once (requests_processing); the report names
// the engine and its version and says once that it writes no step log; and
// no llama-server is left when the sweep ends.
//
// It is a minute or more of real load (twelve runs), so it runs under
// MBENCH_LONG=1 (.ci/run sets it); a plain `go test` still runs a sweep
// against real llama-servers in TestInterruptAndResumeAgainstLlamaServer
// and checks lost requests, usage and streaming in TestLoadAgainstLlamaServer.
func TestSweepAgainstLlamaServer(t *testing.T) {
	if !longrun.On() {
		t.Skip("a long sweep against llama-server: MBENCH_LONG=1 runs it (.ci/run does)")
	}
	bin := findServer(t)
	mdl := model(t)
	mat := testMatrix(t, bin, mdl, nil)
	out := filepath.Join(t.TempDir(), "sweep")
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	start := time.Now()
	code, log := mbench(t, ctx, "run", mat, "--out", out)
	t.Logf("sweep: exit %d after %v", code, time.Since(start).Round(time.Second))
	if code != 0 && code != 3 {
		t.Fatalf("mbench run exit %d:\n%s", code, log)
	}
	if left := serving(mdl); len(left) > 0 {
		t.Errorf("llama-server pids %v still serving after the sweep ended", left)
	}
	// A run the load generator could not drive on schedule is run again in
	// place (b<k>-try<n>): every attempt is a real run and is checked, but
	// the plan's runs are counted once each.
	runs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "b*"))
	planned := map[string]bool{}
	for _, dir := range runs {
		block, _, _ := strings.Cut(filepath.Base(dir), "-try")
		planned[filepath.Join(filepath.Base(filepath.Dir(dir)), block)] = true
	}
	if len(planned) != 12 {
		t.Fatalf("%d planned runs in %d run directories, want 3 configs × 2 rates × 2 blocks:\n%s", len(planned), len(runs), log)
	}
	var maxWaitNp1, maxRunNp4, maxRunAny float64
	// inFlight: per config, the largest client-side mean number of
	// requests in flight over a run (from requests.jsonl): the load the
	// gauges, read from /metrics once a second, had to show.
	inFlight := map[string]float64{}
	for _, dir := range runs {
		s := readSummary(t, dir)
		where := s.Config + " at " + formatRate(s.Rate) + " (" + filepath.Base(filepath.Dir(dir)) + "/" + filepath.Base(dir) + ")"
		recs := readRecords(t, dir)
		if len(recs) > 0 {
			var busy, lo, hi int64 = 0, recs[0].SentNs, 0
			for _, r := range recs {
				busy += r.DoneNs - r.SentNs
				lo, hi = min(lo, r.SentNs), max(hi, r.DoneNs)
			}
			if hi > lo {
				inFlight[s.Config] = max(inFlight[s.Config], float64(busy)/float64(hi-lo))
			}
		}
		if f := failures(recs); f != "" {
			t.Errorf("%s: %s", where, f)
		}
		var cached, prompt int64
		for _, r := range recs {
			if r.Phase == openloop.PhaseMeasure && r.OK() && r.CachedTokens != nil {
				cached += int64(*r.CachedTokens)
				prompt += int64(r.InputTokens)
			}
		}
		pc, rc := s.PrefixCache, s.ResponseCache
		if s.Engine != "llamacpp" || pc == nil || rc == nil {
			t.Fatalf("%s: engine %q, prefix_cache %v, response_cache %v", where, s.Engine, pc, rc)
		}
		if rc.CachedTokens != cached || rc.PromptTokens != prompt {
			t.Errorf("%s: response_cache %d/%d, requests.jsonl says %d/%d", where, rc.CachedTokens, rc.PromptTokens, cached, prompt)
		}
		if pc.Hits != float64(cached) || pc.Queries != float64(prompt) {
			t.Errorf("%s: /metrics hits %v of %v prompt tokens, the responses %d of %d", where, pc.Hits, pc.Queries, cached, prompt)
		}
		// The engine's own per-token time comes from its counters
		// (llamacpp:tokens_predicted_seconds_total over _total), and its
		// process tree was found on this machine.
		if s.Completed > 0 && (pc.EngineTokenMs == nil || !(*pc.EngineTokenMs > 0)) {
			t.Errorf("%s: engine_token_ms %v after %d completed requests", where, pc.EngineTokenMs, s.Completed)
		}
		if c := s.Contention; c == nil || len(c.EngineHosts) != 1 || c.EngineHosts[0].Procs < 1 {
			t.Errorf("%s: contention %+v, want llama-server's process tree on the local host", where, c)
		}
		if pc.KVUsage != nil {
			t.Errorf("%s: kv_usage %+v, but llama-server exports no KV-usage gauge", where, pc.KVUsage)
		}
		// llama-server exports its queue (requests_deferred): once the
		// window held enough scrapes of it to speak (EngineQueueMinRounds),
		// a rising TTFT is saturation only with requests deferred, a drift
		// only without. A shorter window leaves the trend alone to decide.
		if !pc.WaitingExp {
			t.Errorf("%s: prefix_cache.waiting_exported false, but llama-server exports llamacpp:requests_deferred", where)
		}
		queueSpoke := pc.DuringRounds >= results.EngineQueueMinRounds
		if queueSpoke && strings.Contains(s.SaturationReason, "TTFT rises") && !strings.Contains(s.SaturationReason, "engine's queue held") {
			t.Errorf("%s: saturated by TTFT's trend without the engine's queue, read in %d scrapes of the window: %s", where, pc.DuringRounds, s.SaturationReason)
		}
		if !queueSpoke && (strings.Contains(s.SaturationReason, "engine's queue held") || s.TTFTDriftMs != nil) {
			t.Errorf("%s: the engine's queue, read in only %d scrapes of the window, decided the trend: %s %s", where, pc.DuringRounds, s.SaturationReason, s.DriftReason)
		}
		if s.TTFTDriftMs != nil && pc.Waiting.Max != 0 {
			t.Errorf("%s: a drift of %v ms reported while the engine deferred up to %v requests", where, *s.TTFTDriftMs, pc.Waiting.Max)
		}
		switch s.Config {
		case "np4_nocache":
			if pc.Hits != 0 || pc.Queries == 0 {
				t.Errorf("%s: %v hits of %v with the prompt cache off", where, pc.Hits, pc.Queries)
			}
		default:
			if pc.HitRate < 0.5 {
				t.Errorf("%s: hit rate %.3f; 192 of 256 tokens are one of 4 shared prefixes", where, pc.HitRate)
			}
		}
		if s.Config == "np1" {
			maxWaitNp1 = max(maxWaitNp1, pc.Waiting.Max)
			if pc.Running.Max > 1 {
				t.Errorf("%s: %v requests processing on one slot", where, pc.Running.Max)
			}
		}
		maxRunAny = max(maxRunAny, pc.Running.Max)
		if s.Config == "np4" {
			maxRunNp4 = max(maxRunNp4, pc.Running.Max)
		}
	}
	// The gauges are read during the load: some request was seen processing.
	// Queueing on one slot and overlap on four are asserted where the
	// client kept two or more in flight on average (a once-a-second sample
	// then sees them); a fast idle machine may leave less.
	if maxRunAny < 1 {
		t.Errorf("no /metrics scrape during the load saw a request processing (max %v)", maxRunAny)
	}
	t.Logf("client-side mean in flight, most of a run: np1 %.2f, np4 %.2f; gauges: np1 deferred max %v, np4 processing max %v",
		inFlight["np1"], inFlight["np4"], maxWaitNp1, maxRunNp4)
	if inFlight["np1"] >= 2 && maxWaitNp1 < 1 {
		t.Errorf("one slot with %.2f requests in flight on average never had a request deferred (max %v)", inFlight["np1"], maxWaitNp1)
	}
	if inFlight["np4"] >= 2 && maxRunNp4 < 2 {
		t.Errorf("four slots with %.2f requests in flight on average never ran two at once (max %v)", inFlight["np4"], maxRunNp4)
	}
	rep, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| engine (from runs) | llamacpp (llama.cpp llama-server) |", "| engine_version | b1-80fb11a |",
		"llama.cpp llama-server writes no per-step log (engine_step.jsonl)"} {
		if !strings.Contains(string(rep), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if n := strings.Count(string(rep), "per-step log"); n != 1 {
		t.Errorf("report.md mentions the missing step log %d times, want once", n)
	}
	if mlog, _ := os.ReadFile(filepath.Join(out, "mbench.log")); strings.Contains(string(mlog), "step log") {
		t.Errorf("mbench.log warns about a step log llama-server never writes:\n%s", mlog)
	}
}

func formatRate(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) + " req/s" }
