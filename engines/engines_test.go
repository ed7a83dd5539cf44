package engines_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/mbench/mbench/engines"
	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/probes"
)

// TestEveryKindHasAProfile: the matrix's kinds and the table agree.
func TestEveryKindHasAProfile(t *testing.T) {
	for _, k := range matrices.EngineKinds {
		p, err := engines.Lookup(engines.Kind(k))
		if err != nil || p.ReadyPath == "" || p.Name == "" {
			t.Errorf("kind %s: %+v %v", k, p, err)
		}
	}
	if len(engines.Kinds()) != len(matrices.EngineKinds) {
		t.Errorf("table kinds %v, matrix kinds %v", engines.Kinds(), matrices.EngineKinds)
	}
	if _, err := engines.Lookup("tgi"); err == nil || !strings.Contains(err.Error(), "valid: [vllm llamacpp sim]") {
		t.Errorf("unknown kind: %v", err)
	}
}

// TestLlamaCppMetrics reads a /metrics text that llama-server (80fb11a)
// served with 2 slots busy and 4 requests deferred, after 16 prompt tokens
// computed and none cached: running and waiting are its
// requests_processing and requests_deferred, and the prefix cache's
// lookups are the cached plus the computed prompt tokens.
func TestLlamaCppMetrics(t *testing.T) {
	f, err := os.Open("testdata/llamacpp-80fb11a.metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vals, err := probes.ParseMetrics(f)
	if err != nil {
		t.Fatal(err)
	}
	names := engines.Of(engines.LlamaCpp).Metrics
	before := []probes.Scrape{{Target: "a", Values: map[string]float64{"llamacpp:prompt_tokens_total": 0, "llamacpp:prompt_tokens_cached_total": 0}}}
	after := []probes.Scrape{{Target: "a", TsUs: 2, Values: map[string]float64{"llamacpp:prompt_tokens_total": vals["llamacpp:prompt_tokens_total"] + 3, "llamacpp:prompt_tokens_cached_total": 21}}}
	during := []probes.Scrape{{Target: "a", TsUs: 1, Values: vals}}
	cs := names.Summarize(before, after, during)
	if cs.Running != (probes.Level{Mean: 2, Max: 2}) || cs.Waiting != (probes.Level{Mean: 4, Max: 4}) {
		t.Errorf("running %+v waiting %+v, want 2 and 4", cs.Running, cs.Waiting)
	}
	if cs.Hits != 21 || cs.Queries != 40 || !cs.HitRateValid || cs.KVUsage != nil || cs.Preemptions != 0 {
		t.Errorf("cache %+v, want 21 hits of 21 + 19 lookups, no KV usage", cs)
	}
	if vllm := probes.VLLMMetrics.Summarize(before, after, during); vllm.Running.Max != 0 || vllm.HitRateValid {
		t.Errorf("vLLM's names read llama-server's series: %+v", vllm)
	}
}

// TestFields reads the version and the vocabulary size where llama-server
// says them, and refuses answers that do not say them.
func TestFields(t *testing.T) {
	models := `{"models":[{"name":"tiny.gguf"}],"object":"list","data":[{"id":"tiny.gguf","object":"model","owned_by":"llamacpp","meta":{"vocab_type":true,"n_vocab":32000,"n_ctx":2048}}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, models)
		case "/props":
			fmt.Fprint(w, `{"total_slots":4,"build_info":"b1-80fb11a"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	p := engines.Of(engines.LlamaCpp)
	if v := p.VersionOf(ctx, nil, srv.URL); v != "b1-80fb11a" {
		t.Errorf("version %q", v)
	}
	if n, err := p.VocabOf(ctx, nil, srv.URL+"/"); n != 32000 || err != nil {
		t.Errorf("vocab %d %v", n, err)
	}
	if v := engines.Of(engines.VLLM).VersionOf(ctx, nil, srv.URL); v != "" {
		t.Errorf("vLLM version from a server without /version: %q", v)
	}
	if n, err := engines.Of(engines.VLLM).VocabOf(ctx, nil, srv.URL); n != 0 || err != nil {
		t.Errorf("vLLM says no vocabulary size, got %d %v", n, err)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"data":[]}`, `no element "0"`},
		{`{"data":[{"id":"m"}]}`, `no "meta"`},
		{`{"data":[{"meta":{"n_vocab":1.5}}]}`, "not a positive integer"},
		{`{"data":[{"meta":{"n_vocab":"32000"}}]}`, "not a positive integer"},
		{`{"data":"x"}`, "not inside an object or array"},
		{`not json`, "invalid character"},
	} {
		models = tc.body
		if _, err := p.VocabOf(ctx, nil, srv.URL); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.want)
		}
	}
}
