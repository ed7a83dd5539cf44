package router

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/conformance"
	"github.com/mbench/mbench/internal/simtest"
	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/simengine"
)

// mooncakeSims starts n MooncakeConnector sims of role and returns their
// URLs and bootstrap ports.
func mooncakeSims(t *testing.T, n int, role string, prefillUs float64) ([]string, []int) {
	t.Helper()
	var urls []string
	var ports []int
	for range n {
		c := kvSim(role)
		c.PrefillTokenUs = prefillUs
		u, p := simtest.StartMooncake(t, c)
		urls, ports = append(urls, u), append(ports, p)
	}
	return urls, ports
}

func scrape(t *testing.T, u string) probes.Scrape {
	t.Helper()
	s, err := probes.ScrapeMetrics(t.Context(), nil, u+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMooncakePD: 2 producers + 2 consumers speaking vLLM's bootstrap
// protocol. Every request is served; its two legs were sent at once (the
// decode leg before the prefill answered) with one transfer id; the
// consumers received every prompt's full blocks from the producers
// (external hits); the producers hold nothing afterwards; round robin
// alternates producers.
func TestMooncakePD(t *testing.T) {
	prods, ports := mooncakeSims(t, 2, simengine.KVRoleProducer, 2) // 2 µs/token: a 3000-token prefill takes 6 ms
	cons, _ := mooncakeSims(t, 2, simengine.KVRoleConsumer, 2)
	u, log := startRouterWith(t, cons, prods, Options{Policy: RoundRobin}, ServerOptions{Protocol: ProtocolMooncake, BootstrapPorts: ports})
	waitHealthy(t, u)
	const n, tokens = 12, 3000
	for k := range n {
		p, _ := json.Marshal(prompt(uint64(100+k), 0, tokens))
		if status, body := postBounded(t, u, `{"prompt": `+string(p)+`, "max_tokens": 3, "min_tokens": 3, "stream": true}`); status != http.StatusOK || !strings.Contains(body, "[DONE]") {
			t.Fatalf("request %d: %d %s", k, status, body)
		}
	}
	es := waitEntries(t, log, n)
	perProducer := map[int]int{}
	ids := map[string]bool{}
	for _, e := range es {
		if e.Status != 200 || e.Split != "pd" || e.TransferID == "" || ids[e.TransferID] || e.PrefillStatus != 200 {
			t.Errorf("entry %+v", e)
		}
		ids[e.TransferID] = true
		if !(e.DecodeSentMs < e.PrefillMs) {
			t.Errorf("decode leg sent at %.3f ms, prefill answered at %.3f ms: want the legs concurrent", e.DecodeSentMs, e.PrefillMs)
		}
		perProducer[e.PrefillInstance]++
	}
	if perProducer[2] != n/2 || perProducer[3] != n/2 {
		t.Errorf("prefills per producer %v, want %d each", perProducer, n/2)
	}
	ext := 0.0
	for _, c := range cons {
		ext += scrape(t, c).Values["vllm:external_prefix_cache_hits_total"]
	}
	if want := float64(n * ((tokens - 1) / 16 * 16)); ext != want {
		t.Errorf("consumers' external hits %v, want every prompt's full blocks: %v", ext, want)
	}
	for _, p := range prods {
		if got := scrape(t, p).Values["vllm:prompt_tokens_total"]; got != n/2*tokens {
			t.Errorf("producer %s prefilled %v tokens, want %d", p, got, n/2*tokens)
		}
	}
}

// TestMooncakeOffload: elastic offload over kv_both sims with the bootstrap
// protocol: a HEAVY first turn prefills on another instance and decodes on
// its sticky one, which receives the KV.
func TestMooncakeOffload(t *testing.T) {
	sims, ports := mooncakeSims(t, 3, simengine.KVRoleBoth, 0.05)
	u, log := startRouterWith(t, sims, nil, Options{Policy: Sticky, Offload: true, HeavyTokens: 1000, OverrideFactor: 100},
		ServerOptions{Protocol: ProtocolMooncake, BootstrapPorts: ports})
	waitHealthy(t, u)
	p, _ := json.Marshal(prompt(7, 0, 4000))
	if status, body := postBounded(t, u, `{"prompt": `+string(p)+`, "max_tokens": 2, "stream": true}`); status != http.StatusOK {
		t.Fatalf("offloaded request: %d %s", status, body)
	}
	e := waitEntries(t, log, 1)[0]
	if e.Split != "offload" || e.PrefillInstance == e.Instance || e.Status != 200 {
		t.Fatalf("entry %+v", e)
	}
	if got := scrape(t, sims[e.Instance]).Values["vllm:external_prefix_cache_hits_total"]; got != 3999/16*16 {
		t.Errorf("decode instance external hits %v, want %d", got, 3999/16*16)
	}
}

// fakeBootstrap is a bootstrap server that answers GET /query with
// whatever answer holds: status and body.
type fakeBootstrap struct {
	srv    *httptest.Server
	port   int
	status atomic.Int32
	body   atomic.Value // []byte
}

func newFakeBootstrap(t *testing.T, status int, body []byte) *fakeBootstrap {
	t.Helper()
	f := &fakeBootstrap{}
	f.set(status, body)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/query" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(f.status.Load()))
		w.Write(f.body.Load().([]byte))
	}))
	t.Cleanup(f.srv.Close)
	_, p, _ := net.SplitHostPort(f.srv.Listener.Addr().String())
	json.Unmarshal([]byte(p), &f.port)
	return f
}

func (f *fakeBootstrap) set(status int, body []byte) {
	f.body.Store(body)
	f.status.Store(int32(status))
}

// health is the router's /health status and body.
func health(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// leg is one request an engine received.
type leg struct {
	header http.Header
	body   map[string]json.RawMessage
}

// recordingEngine answers every completion as an engine would (a prefill
// leg with one JSON answer, a streamed leg with SSE) and records it.
func recordingEngine(t *testing.T, legs chan<- leg) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet { // /health, /metrics
			return
		}
		var body map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		legs <- leg{r.Header.Clone(), body}
		if string(body["stream"]) == "true" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"text":"x","finish_reason":"length"}]}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestMooncakeConformance: the router against a bootstrap server that
// answers vLLM 0.18.1's exact /query bytes (internal/conformance). While
// /query answers {} (no worker registered) the router keeps waiting and
// says so; once it names the engine, a completion's two legs carry the
// golden kv_transfer_params: one transfer_id ("xfer-" + the X-Request-Id
// both legs send), the decode leg /query's engine id and the bootstrap
// address and no DP rank; the prefill leg ignore_eos, max_tokens 1, no
// min_tokens, not streamed, its X-data-parallel-rank the DP rank.
func TestMooncakeConformance(t *testing.T) {
	g := conformance.MooncakeGolden
	boot := newFakeBootstrap(t, 200, conformance.MooncakeBody(conformance.MooncakeQueryUnregistered, g))
	pLegs, dLegs := make(chan leg, 4), make(chan leg, 4)
	prod, cons := recordingEngine(t, pLegs), recordingEngine(t, dLegs)
	u, log := startRouterWith(t, []string{cons}, []string{prod}, Options{Policy: RoundRobin},
		ServerOptions{Protocol: ProtocolMooncake, BootstrapPorts: []int{boot.port}})
	var status int
	var body string
	waitFor(t, func() bool { status, body = health(t, u); return !strings.Contains(body, "not asked yet") }, "the router to ask /query")
	if status != 503 || !strings.Contains(body, "port "+itoa(boot.port)+" answered GET /query with {}") {
		t.Errorf("health while /query is {}: %d %s", status, body)
	}
	if status, body := post(t, u, `{"prompt": [1, 2, 3], "max_tokens": 1}`); status != http.StatusServiceUnavailable {
		t.Errorf("request before registration: %d %s", status, body)
	}
	boot.set(200, conformance.MooncakeBody(conformance.MooncakeQueryRegistered, g))
	waitHealthy(t, u)
	if status, body := postBounded(t, u, `{"prompt": [1, 2, 3], "max_tokens": 5, "min_tokens": 5, "stream": true, "stream_options": {"include_usage": true}}`); status != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("completion: %d %s", status, body)
	}
	p, d := <-pLegs, <-dLegs
	rid := p.header.Get("X-Request-Id")
	if rid == "" || d.header.Get("X-Request-Id") != rid || p.header.Get("X-data-parallel-rank") != "0" || d.header.Get("X-data-parallel-rank") != "" {
		t.Errorf("headers: prefill %v, decode %v", p.header, d.header)
	}
	v := conformance.Mooncake{BootstrapAddr: "http://127.0.0.1:" + itoa(boot.port), RequestID: rid}
	for _, c := range []struct {
		leg  leg
		name string
	}{{p, conformance.MooncakePrefillParams}, {d, conformance.MooncakeDecodeParams}} {
		if got, want := string(c.leg.body["kv_transfer_params"]), string(conformance.MooncakeBody(c.name, v)); got != want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want)
		}
	}
	if string(p.body["ignore_eos"]) != "true" || string(p.body["max_tokens"]) != "1" || string(p.body["stream"]) != "false" || p.body["min_tokens"] != nil || p.body["stream_options"] != nil {
		t.Errorf("prefill leg: %s", must(json.Marshal(p.body)))
	}
	if string(d.body["max_tokens"]) != "5" || string(d.body["min_tokens"]) != "5" || string(d.body["stream"]) != "true" {
		t.Errorf("decode leg: %s", must(json.Marshal(d.body)))
	}
	if e := waitEntries(t, log, 1)[0]; e.TransferID != "xfer-"+rid {
		t.Errorf("logged transfer id %q, want xfer-%s", e.TransferID, rid)
	}
}

// TestMooncakeNotABootstrapServer: a bootstrap port that answers 404 (an
// engine's API port given by mistake), 503, or another revision's /query
// shape (the PR branch's, keyed by engine id) keeps the router unready,
// its /health naming the port and what it answered; no leg is sent.
func TestMooncakeNotABootstrapServer(t *testing.T) {
	legs := make(chan leg, 4)
	prod, cons := recordingEngine(t, legs), recordingEngine(t, legs)
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{404, `{"detail":"Not Found"}`, "answered GET /query with 404"},
		{503, `{"detail":"Workers still registering"}`, "answered GET /query with status 503"},
		{200, `{"4f0e6f0a-8a53-4c1b-9a57-6d7e0a1c2b3d": {"0": {"0": {"0": "tcp://10.0.0.5:45123"}}}}`, "is not a DP rank"},
		{200, `{"0": {"engine_id": "e", "worker_addr": {"0": {"0": "tcp://h:1"}}, "dp_rank": 0}}`, "unknown field"},
		{200, `[]`, "not vLLM 0.18's bootstrap answer"},
	} {
		boot := newFakeBootstrap(t, c.status, []byte(c.body))
		u, _ := startRouterWith(t, []string{cons}, []string{prod}, Options{Policy: RoundRobin},
			ServerOptions{Protocol: ProtocolMooncake, BootstrapPorts: []int{boot.port}})
		var status int
		var body string
		waitFor(t, func() bool { status, body = health(t, u); return !strings.Contains(body, "not asked yet") }, "the router to ask /query")
		if status != 503 || !strings.Contains(body, "port "+itoa(boot.port)) || !strings.Contains(body, c.want) {
			t.Errorf("%d %s: health %d %s, want 503 naming port %d and %q", c.status, c.body, status, body, boot.port, c.want)
		}
		if status, body := post(t, u, `{"prompt": [1, 2, 3], "max_tokens": 1}`); status != http.StatusServiceUnavailable {
			t.Errorf("%d %s: request %d %s, want 503", c.status, c.body, status, body)
		}
	}
	select {
	case l := <-legs:
		t.Errorf("a leg was sent while no bootstrap server named an engine: %v", l.body)
	default:
	}
}

// TestMooncakePrefillFails: a prefill leg that fails ends the decode leg
// (which would wait for KV that never comes) and the client gets the
// prefill's status and reason; the router carries no load afterwards. The
// NIXL protocol against a MooncakeConnector producer is refused with the
// hint to switch.
func TestMooncakePrefillFails(t *testing.T) {
	c := kvSim(simengine.KVRoleProducer)
	c.Fault = simengine.FaultHTTP500
	prod, port := simtest.StartMooncake(t, c)
	cons, _ := mooncakeSims(t, 1, simengine.KVRoleConsumer, 0.05)
	u, log := startRouterWith(t, cons, []string{prod}, Options{Policy: RoundRobin}, ServerOptions{Protocol: ProtocolMooncake, BootstrapPorts: []int{port}})
	waitHealthy(t, u)
	done := make(chan struct{})
	var status int
	var body string
	go func() {
		status, body = post(t, u, `{"prompt": `+string(must(json.Marshal(prompt(3, 0, 600))))+`, "max_tokens": 2, "stream": true}`)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang's bound
		t.Fatal("the request hung: the decode leg was left waiting for KV")
	}
	if status != http.StatusInternalServerError || !strings.Contains(body, "prefill on") {
		t.Errorf("failed prefill: %d %s", status, body)
	}
	e := waitEntries(t, log, 1)[0]
	if e.PrefillStatus != 500 || e.PrefillError == "" || e.Status != 500 {
		t.Errorf("entry %+v", e)
	}
	waitFor(t, func() bool { return scrape(t, cons[0]).Values["mbench_sim_waiting_remote_kv"] == 0 }, "the cancelled decode leg to leave the consumer")

	// The nixl protocol against a MooncakeConnector producer: its answer
	// carries no kv_transfer_params, so the decode computes the prompt, and
	// the router says why once.
	good, _ := simtest.StartMooncake(t, kvSim(simengine.KVRoleProducer))
	var msgs syncBuf
	nixl, nlog := startRouterWith(t, cons, []string{good}, Options{Policy: RoundRobin}, ServerOptions{Messages: &msgs})
	for range 2 {
		if status, body := postBounded(t, nixl, `{"prompt": [1, 2, 3], "max_tokens": 1}`); status != http.StatusOK {
			t.Errorf("nixl against a MooncakeConnector: %d %s", status, body)
		}
	}
	for _, e := range waitEntries(t, nlog, 2) {
		if !e.Recompute || e.Status != 200 {
			t.Errorf("entry %+v: want a recompute", e)
		}
	}
	if got := msgs.String(); strings.Count(got, "--kv-protocol mooncake") != 1 {
		t.Errorf("router messages %q: want the hint once", got)
	}
}

// syncBuf is a bytes.Buffer safe for the router's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNixlEOSFirstToken: a nixl prefill leg carries no ignore_eos, as vLLM's
// toy proxy sends it; when its one token is EOS the engine answers no
// kv_transfer_params, and the decode leg gets the request as the client
// sent it (and computes the prompt), not a 502.
func TestNixlEOSFirstToken(t *testing.T) {
	prefill := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			var body map[string]json.RawMessage
			if json.NewDecoder(r.Body).Decode(&body) != nil || body["ignore_eos"] != nil || string(body["max_tokens"]) != "1" || body["min_tokens"] != nil {
				http.Error(w, "want the toy proxy's prefill leg: max_tokens 1, no ignore_eos, no min_tokens", 400)
				return
			}
			io.WriteString(w, `{"id":"cmpl-1","choices":[{"index":0,"text":"","finish_reason":"stop"}],"kv_transfer_params":null}`)
		}
	}))
	defer prefill.Close()
	dLegs := make(chan leg, 1)
	decode := recordingEngine(t, dLegs)
	u, log := startRouter(t, []string{decode}, []string{prefill.URL}, Options{Policy: RoundRobin})
	waitHealthy(t, u)
	const req = `{"prompt": [1, 2, 3], "max_tokens": 7, "min_tokens": 2, "stream": true}`
	if status, body := postBounded(t, u, req); status != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("request: %d %s", status, body)
	}
	d := <-dLegs
	if _, ok := d.body["kv_transfer_params"]; ok || string(d.body["max_tokens"]) != "7" || string(d.body["min_tokens"]) != "2" {
		t.Errorf("decode leg %s: want the client's request", must(json.Marshal(d.body)))
	}
	if e := waitEntries(t, log, 1)[0]; !e.Recompute || e.Status != 200 || e.PrefillStatus != 200 {
		t.Errorf("entry %+v", e)
	}
}

// postBounded is post with a 30 s client timeout: a decode leg whose KV
// never comes waits, and the test must fail, not hang.
func postBounded(t *testing.T, u, body string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Post(u+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func waitHealthy(t *testing.T, u string) {
	t.Helper()
	waitFor(t, func() bool {
		resp, err := http.Get(u + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "the router to be healthy")
}

var lastWait any

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (%v)", what, lastWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
