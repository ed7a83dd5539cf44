package router

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// TestMooncakeReadiness: the router is not ready — /health and routed
// requests answer 503 naming the bootstrap server — until the producer's
// bootstrap server answers GET /query with its engine (vLLM's answers 503
// while its workers register).
func TestMooncakeReadiness(t *testing.T) {
	prods, ports := mooncakeSims(t, 1, simengine.KVRoleProducer, 0.05)
	cons, _ := mooncakeSims(t, 1, simengine.KVRoleConsumer, 0.05)
	var registered atomic.Bool
	target, _ := url.Parse("http://127.0.0.1:" + itoa(ports[0]))
	proxy := httputil.NewSingleHostReverseProxy(target)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !registered.Load() {
			http.Error(w, `{"detail":"Workers still registering: 0/1"}`, http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer gate.Close()
	_, gport, _ := net.SplitHostPort(gate.Listener.Addr().String())
	gp := 0
	json.Unmarshal([]byte(gport), &gp)
	u, _ := startRouterWith(t, cons, prods, Options{Policy: RoundRobin}, ServerOptions{Protocol: ProtocolMooncake, BootstrapPorts: []int{gp}})
	var health string
	waitFor(t, func() bool { // the router has asked the bootstrap server once
		resp, err := http.Get(u + "/health")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		health = itoa(resp.StatusCode) + " " + string(b)
		return !strings.Contains(health, "not asked yet")
	}, "the router to ask the bootstrap server")
	if !strings.HasPrefix(health, "503 ") || !strings.Contains(health, gport) || !strings.Contains(health, "status 503") {
		t.Errorf("health before registration: %s", health)
	}
	if status, body := post(t, u, `{"prompt": [1, 2, 3], "max_tokens": 1}`); status != http.StatusServiceUnavailable {
		t.Errorf("request before registration: %d %s", status, body)
	}
	registered.Store(true)
	waitHealthy(t, u)
	if status, body := postBounded(t, u, `{"prompt": [1, 2, 3], "max_tokens": 1}`); status != http.StatusOK {
		t.Errorf("request after registration: %d %s", status, body)
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
	case <-time.After(20 * time.Second):
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

	good, gport := simtest.StartMooncake(t, kvSim(simengine.KVRoleProducer))
	nixl, _ := startRouter(t, cons, []string{good}, Options{Policy: RoundRobin})
	_ = gport
	if status, body := post(t, nixl, `{"prompt": [1, 2, 3], "max_tokens": 1}`); status != http.StatusBadGateway || !strings.Contains(body, "--kv-protocol mooncake") {
		t.Errorf("nixl against a MooncakeConnector: %d %s", status, body)
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
