package simengine

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var (
	tokenChunkRe = regexp.MustCompile(`^\{"id":"(cmpl-[0-9a-f]{32})","object":"text_completion","created":(\d+),"model":"sim-model",` +
		`"choices":\[\{"index":0,"text":("[^"]*"),"logprobs":null,"finish_reason":(null|"length"|"stop"),"stop_reason":null\}\],"usage":null\}$`)
	usageChunkRe = regexp.MustCompile(`^\{"id":"(cmpl-[0-9a-f]{32})","object":"text_completion","created":(\d+),"model":"sim-model",` +
		`"choices":\[\],"usage":\{"prompt_tokens":(\d+),"total_tokens":(\d+),"completion_tokens":(\d+)\}\}$`)
)

func TestStreamIgnoreEOSExactTokens(t *testing.T) {
	te := startEngine(t, fastCfg())
	for _, tc := range []struct {
		name         string
		prompt, max  int
		includeUsage bool
	}{
		{"one token", 5, 1, true},
		{"seven tokens", 33, 7, true},
		{"forty, no usage", 16, 40, false},
		{"long prompt", 3000, 3, true}, // chunked over two steps
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"sim-model","prompt":` + idsPrompt(tc.prompt, 7) + `,"max_tokens":` + itoa(tc.max) +
				`,"min_tokens":` + itoa(tc.max) + `,"ignore_eos":true,"stream":true,"temperature":0.7`
			if tc.includeUsage {
				body += `,"stream_options":{"include_usage":true}`
			}
			status, out := te.post(t, body+"}")
			if status != 200 {
				t.Fatalf("status %d: %s", status, out)
			}
			evs := sseEvents(t, out)
			want := tc.max + 1
			if tc.includeUsage {
				want++
			}
			if len(evs) != want {
				t.Fatalf("got %d events, want %d tokens + usage + [DONE]:\n%s", len(evs), tc.max, out)
			}
			var id string
			for i := 0; i < tc.max; i++ {
				m := tokenChunkRe.FindStringSubmatch(evs[i])
				if m == nil {
					t.Fatalf("chunk %d not shaped like vLLM's: %s", i, evs[i])
				}
				if id == "" {
					id = m[1]
				} else if m[1] != id {
					t.Errorf("chunk %d id %s, want %s", i, m[1], id)
				}
				wantFinish := "null"
				if i == tc.max-1 {
					wantFinish = `"length"`
				}
				if m[4] != wantFinish {
					t.Errorf("chunk %d finish_reason %s, want %s", i, m[4], wantFinish)
				}
			}
			if tc.includeUsage {
				m := usageChunkRe.FindStringSubmatch(evs[tc.max])
				if m == nil {
					t.Fatalf("usage chunk not shaped like vLLM's: %s", evs[tc.max])
				}
				if m[1] != id || m[3] != itoa(tc.prompt) || m[5] != itoa(tc.max) || m[4] != itoa(tc.prompt+tc.max) {
					t.Errorf("usage chunk %s: want id %s, prompt %d, completion %d", evs[tc.max], id, tc.prompt, tc.max)
				}
			}
			if evs[len(evs)-1] != "[DONE]" {
				t.Errorf("last event %q, want [DONE]", evs[len(evs)-1])
			}
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestNonStreamAndStringPrompt(t *testing.T) {
	te := startEngine(t, fastCfg())
	status, out := te.post(t, `{"prompt":"the quick  brown\tfox","max_tokens":6,"ignore_eos":true}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, out)
	}
	var r struct {
		Object  string
		Choices []struct {
			Text         string
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Total      int `json:"total_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Object != "text_completion" || len(r.Choices) != 1 || r.Choices[0].FinishReason != "length" {
		t.Fatalf("bad response %s", out)
	}
	if got := len(strings.Fields(r.Choices[0].Text)); got != 6 {
		t.Errorf("text %q has %d words, want 6", r.Choices[0].Text, got)
	}
	if r.Usage != (struct {
		Prompt     int `json:"prompt_tokens"`
		Completion int `json:"completion_tokens"`
		Total      int `json:"total_tokens"`
	}{4, 6, 10}) {
		t.Errorf("usage %+v, want 4 prompt (one per word), 6 completion", r.Usage)
	}
}

func TestPseudoEOSNeverBeforeMinTokens(t *testing.T) {
	te := startEngine(t, Config{StepBaseUs: 100, Jitter: -1, Seed: 3})
	stops := 0
	for i := 0; i < 20; i++ {
		status, out := te.post(t, `{"prompt":[1,2,3],"max_tokens":300,"min_tokens":20,"stream":true,"stream_options":{"include_usage":true}}`)
		if status != 200 {
			t.Fatalf("status %d: %s", status, out)
		}
		evs := sseEvents(t, out)
		m := usageChunkRe.FindStringSubmatch(evs[len(evs)-2])
		if m == nil {
			t.Fatalf("no usage chunk: %s", evs[len(evs)-2])
		}
		n := atoi(t, m[5])
		last := tokenChunkRe.FindStringSubmatch(evs[len(evs)-3])
		if n < 20 || n != len(evs)-2 {
			t.Errorf("completion_tokens %d with %d token chunks; want >= min_tokens 20", n, len(evs)-2)
		}
		if n < 300 {
			stops++
			if last[4] != `"stop"` {
				t.Errorf("early end with finish_reason %s, want \"stop\"", last[4])
			}
		}
	}
	if stops == 0 {
		t.Errorf("no request of 20 stopped at a pseudo-EOS before 300 tokens (p=%.2f per token)", eosProb)
	}
}

func atoi(t *testing.T, s string) int {
	var n int
	if err := json.Unmarshal([]byte(s), &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBadRequests(t *testing.T) {
	te := startEngine(t, Config{KVBlocks: 4, BlockSize: 16, StepBaseUs: 100, Jitter: -1})
	for _, tc := range []struct {
		name, body string
		status     int
		typ, msg   string
	}{
		{"not json", `{"prompt":`, 400, "BadRequestError", "invalid JSON body"},
		{"trailing data", `{"prompt":"a"} {}`, 400, "BadRequestError", "data after the request object"},
		{"no prompt", `{"max_tokens":3}`, 400, "BadRequestError", "prompt: field required"},
		{"empty prompt", `{"prompt":"   "}`, 400, "BadRequestError", "must not be empty"},
		{"float ids", `{"prompt":[1.5,2]}`, 400, "BadRequestError", "prompt: must be a string or a list of integer token ids"},
		{"negative id", `{"prompt":[1,-2]}`, 400, "BadRequestError", "token id -2 at index 1 is out of vocabulary"},
		{"batch", `{"prompt":["a","b"]}`, 400, "BadRequestError", "batch of 2"},
		{"max_tokens 0", `{"prompt":"a","max_tokens":0}`, 400, "BadRequestError", "max_tokens must be at least 1, got 0."},
		{"min > max", `{"prompt":"a","max_tokens":2,"min_tokens":3}`, 400, "BadRequestError", "min_tokens must be less than or equal to max_tokens=2"},
		{"stream_options without stream", `{"prompt":"a","stream_options":{"include_usage":true}}`, 400, "BadRequestError", "stream=True"},
		{"prompt too long for KV", `{"prompt":` + idsPrompt(64, 0) + `}`, 400, "BadRequestError", "maximum context length is 64 tokens. However, your request has 64 input tokens"},
		{"prompt+completion too long", `{"prompt":` + idsPrompt(60, 0) + `,"max_tokens":5}`, 400, "BadRequestError", "you requested 65 tokens (60 in the messages, 5 in the completion)"},
		{"unknown model", `{"prompt":"a","model":"llama"}`, 404, "NotFoundError", "The model `llama` does not exist."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out := te.post(t, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, out)
			}
			var e errorBody
			if err := json.Unmarshal([]byte(out), &e); err != nil {
				t.Fatalf("error body %q: %v", out, err)
			}
			if e.Object != "error" || e.Type != tc.typ || e.Code != tc.status || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("got %s, want type %s, code %d, message containing %q", out, tc.typ, tc.status, tc.msg)
			}
			if !strings.HasPrefix(out, `{"object":"error","message":`) || !strings.Contains(out, `"param":null`) {
				t.Errorf("not vLLM's error shape: %s", out)
			}
		})
	}
	if m := te.metrics(t); m["vllm:prefix_cache_queries_total"] != 0 || m["mbench_sim_steps_total"] != 0 {
		t.Errorf("rejected requests reached the engine: %v", m)
	}
}

func TestSimulatedLabelsAndEndpoints(t *testing.T) {
	te := startEngine(t, Config{Model: "m/x"})
	get := func(path string) (*http.Response, string) {
		resp, err := http.Get(te.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("X-Mbench-Simulated") != "true" {
			t.Errorf("%s: missing X-Mbench-Simulated: true", path)
		}
		return resp, string(b)
	}
	if resp, body := get("/health"); resp.StatusCode != 200 || body != "" {
		t.Errorf("/health: %d %q, want 200 and an empty body", resp.StatusCode, body)
	}
	if _, body := get("/v1/models"); !strings.HasPrefix(body, `{"object":"list","data":[{"id":"m/x","object":"model",`) ||
		!strings.Contains(body, `"owned_by":"mbench-sim"`) {
		t.Errorf("/v1/models: %s", body)
	}
	if _, body := get("/version"); body != `{"version":"mbench-sim-`+Version+`","simulated":true}`+"\n" {
		t.Errorf("/version: %s", body)
	}
	if resp, _ := get("/nope"); resp.StatusCode != 404 {
		t.Errorf("/nope: %d, want 404", resp.StatusCode)
	}
	if resp, _ := get("/v1/completions"); resp.StatusCode != 405 {
		t.Errorf("GET /v1/completions: %d, want 405", resp.StatusCode)
	}
	_, text := get("/metrics")
	for _, want := range []string{"\nmbench_sim_info 1\n", `vllm:num_requests_running{engine="0",model_name="m/x"} 0`,
		"# TYPE vllm:prefix_cache_hits_total counter", "# HELP vllm:kv_cache_usage_perc "} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	m := te.metrics(t)
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
		"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total", "mbench_sim_info"} {
		if _, ok := m[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

func TestPrefixCacheHits(t *testing.T) {
	te := startEngine(t, Config{StepBaseUs: 100, Jitter: -1, BlockSize: 16})
	send := func(prompt string) {
		if status, out := te.post(t, `{"prompt":`+prompt+`,"max_tokens":2,"ignore_eos":true}`); status != 200 {
			t.Fatalf("status %d: %s", status, out)
		}
	}
	hits := func() (float64, float64) {
		m := te.metrics(t)
		return m["vllm:prefix_cache_hits_total"], m["vllm:prefix_cache_queries_total"]
	}
	a := idsPrompt(100, 0)
	send(a)
	if h, q := hits(); h != 0 || q != 100 {
		t.Fatalf("first prompt: hits %v queries %v, want 0 and 100", h, q)
	}
	send(a) // 6 full blocks; the last token is never a hit, (100-1)/16 = 6 blocks
	if h, q := hits(); h != 96 || q != 200 {
		t.Fatalf("repeated prompt: hits %v queries %v, want 96 and 200", h, q)
	}
	send(idsPrompt(100, 1000)) // different from the first token on
	if h, q := hits(); h != 96 || q != 300 {
		t.Fatalf("different prompt: hits %v queries %v, want 96 and 300", h, q)
	}
	// Shares the first 40 tokens (2 full blocks) with a.
	shared := strings.TrimSuffix(idsPrompt(40, 0), "]") + "," + strings.TrimPrefix(idsPrompt(30, 5000), "[")
	send(shared)
	if h, q := hits(); h != 96+32 || q != 370 {
		t.Fatalf("shared 40-token prefix: hits %v queries %v, want %d and 370", h, q, 96+32)
	}
	// Exactly one block long: the whole prompt is cached, but the last
	// token is recomputed, so no hit (as vLLM).
	send(idsPrompt(16, 0))
	send(idsPrompt(16, 0))
	if h, _ := hits(); h != 128 {
		t.Fatalf("16-token prompt repeated: hits %v, want 128 (no new hit)", h)
	}
}
