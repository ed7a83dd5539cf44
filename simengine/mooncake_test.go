package simengine

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// mooncakePair starts a MooncakeConnector kv_producer and kv_consumer; the
// producer's bootstrap server listens on a port the kernel picks.
func mooncakePair(t *testing.T, abort time.Duration) (p, d *testEngine, bootstrap string) {
	t.Helper()
	cfg := fastCfg()
	cfg.PrefillTokenUs, cfg.TokenBudget, cfg.KVConnector, cfg.MooncakeAbortTimeout = 20, 8192, KVConnectorMooncake, abort
	pc, dc := cfg, cfg
	pc.KVRole, pc.BootstrapAddr = KVRoleProducer, "127.0.0.1:0"
	dc.KVRole, dc.KVTransferUsPerToken = KVRoleConsumer, 5
	p, d = startEngine(t, pc), startEngine(t, dc)
	waitFor(t, func() bool { return p.e.BootstrapAddr() != "" }, "the bootstrap server to listen")
	return p, d, "http://" + p.e.BootstrapAddr()
}

// postLeg sends one leg with an X-Request-Id and returns status and body.
func postLeg(ctx context.Context, url, xrid, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("X-Request-Id", xrid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func engineIDOf(t *testing.T, bootstrap string) string {
	t.Helper()
	resp, err := http.Get(bootstrap + "/query")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var q map[string]map[string]map[string]map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&q); err != nil || resp.StatusCode != 200 || len(q) != 1 {
		t.Fatalf("GET /query: %d %v %v", resp.StatusCode, q, err)
	}
	for id, dp := range q {
		if dp["0"]["0"]["0"] == "" {
			t.Fatalf("GET /query: no worker for dp 0 tp 0 pp 0: %v", q)
		}
		return id
	}
	return ""
}

// TestMooncakeBootstrapHandoff: vLLM's bootstrap protocol between a
// producer and a consumer sim, with the legs in either order. The producer's
// answer carries no kv_transfer_params; the consumer, told the bootstrap
// server and engine, pulls the prompt's full blocks (external hits), pays
// the modelled transfer and decodes; the producer frees the held blocks
// once sent.
func TestMooncakeBootstrapHandoff(t *testing.T) {
	const n = 2000
	full := float64((n - 1) / 16 * 16)
	p, d, boot := mooncakePair(t, 30*time.Second)
	eid := engineIDOf(t, boot)
	decodeKV := `{"do_remote_decode": false, "do_remote_prefill": true, "remote_bootstrap_addr": "` + boot +
		`", "remote_engine_id": "` + eid + `", "remote_dp_rank": 0}`
	for k, decodeFirst := range []bool{false, true} {
		prompt := idsPrompt(n, 10000*(k+1))
		xrid := "req-" + itoa(k)
		pBody := `{"prompt": ` + prompt + `, "max_tokens": 1, "ignore_eos": true, "stream": false, "kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false}}`
		dBody := `{"prompt": ` + prompt + `, "max_tokens": 4, "ignore_eos": true, "kv_transfer_params": ` + decodeKV + `}`
		type res struct {
			status int
			body   string
			err    error
		}
		dres := make(chan res, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a decode that never gets its KV waits
		defer cancel()
		sendD := func() {
			go func() { s, b, err := postLeg(ctx, d.url, xrid, dBody); dres <- res{s, b, err} }()
		}
		if decodeFirst {
			sendD()
			waitFor(t, func() bool { return p.e.moon.pending() == 1 }, "the consumer's pull to reach the producer")
		}
		status, body, err := postLeg(ctx, p.url, xrid, pBody)
		if err != nil || status != 200 || strings.Contains(body, "kv_transfer_params") {
			t.Fatalf("prefill leg: %d %s %v (want 200 without kv_transfer_params)", status, body, err)
		}
		if !decodeFirst {
			if held := p.e.moon.pending(); held != 1 {
				t.Fatalf("after the prefill leg the producer holds %d requests for a decode, want 1", held)
			}
			sendD()
		}
		r := <-dres
		if r.err != nil || r.status != 200 {
			t.Fatalf("decode leg (decode first %v): %d %s %v", decodeFirst, r.status, r.body, r.err)
		}
		dm := d.metrics(t)
		if got := dm["vllm:external_prefix_cache_hits_total"]; got != full*float64(k+1) {
			t.Errorf("decode first %v: consumer external hits %v, want %v", decodeFirst, got, full*float64(k+1))
		}
		if held := p.e.moon.pending(); held != 0 {
			t.Errorf("decode first %v: producer still holds %d requests after the pull", decodeFirst, held)
		}
	}
}

// TestMooncakeUnpaired: a decode leg whose prefill never comes, or that
// lacks the bootstrap fields, waits — as vLLM's does — until its client
// gives up (counted in mbench_sim_waiting_remote_kv meanwhile); a prefill
// leg whose decode never asks holds its blocks until the abort timeout.
func TestMooncakeUnpaired(t *testing.T) {
	p, d, boot := mooncakePair(t, 300*time.Millisecond)
	eid := engineIDOf(t, boot)
	for _, kv := range []string{
		`{"do_remote_prefill": true, "remote_bootstrap_addr": "` + boot + `", "remote_engine_id": "` + eid + `", "remote_dp_rank": 0}`,
		`{"do_remote_prefill": true, "remote_host": "127.0.0.1", "remote_port": 1, "remote_engine_id": "x"}`, // NIXL-style: not enough
	} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, _, err := postLeg(ctx, d.url, "lonely", `{"prompt": `+idsPrompt(200, 7)+`, "max_tokens": 2, "kv_transfer_params": `+kv+`}`)
			done <- err
		}()
		waitFor(t, func() bool { return d.metrics(t)["mbench_sim_waiting_remote_kv"] == 1 }, "the decode leg to wait for remote KV")
		select {
		case err := <-done:
			t.Fatalf("%s: the decode leg ended (%v) while its KV never came", kv, err)
		case <-time.After(400 * time.Millisecond): // past the producer's abort timeout: still waiting
		}
		cancel()
		<-done
		waitFor(t, func() bool { return d.metrics(t)["mbench_sim_waiting_remote_kv"] == 0 }, "the abandoned decode leg to go")
	}
	free := p.metrics(t)["vllm:kv_cache_usage_perc"]
	status, body, err := postLeg(context.Background(), p.url, "no-decode", `{"prompt": `+idsPrompt(4000, 99)+
		`, "max_tokens": 1, "ignore_eos": true, "kv_transfer_params": {"do_remote_decode": true}}`)
	if err != nil || status != 200 {
		t.Fatalf("prefill leg: %d %s %v", status, body, err)
	}
	if used := p.metrics(t)["vllm:kv_cache_usage_perc"]; used <= free || p.e.moon.pending() != 1 {
		t.Fatalf("after the prefill leg: KV usage %v (before %v), %d held; want its blocks held for the decode", used, free, p.e.moon.pending())
	}
	waitFor(t, func() bool { return p.e.moon.pending() == 0 }, "the held prefill to expire")
	if used := p.metrics(t)["vllm:kv_cache_usage_perc"]; used != free {
		t.Errorf("after the abort timeout KV usage is %v, want %v (the held blocks freed)", used, free)
	}
}

// waitFor polls cond (the event itself, not a fixed sleep) for up to 10 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
