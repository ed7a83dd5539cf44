package simengine

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/conformance"
)

// mooncakePair starts a MooncakeConnector kv_producer and kv_consumer; the
// producer's bootstrap server listens on a port the kernel picks, and its
// worker registers after register.
func mooncakePair(t *testing.T, abort, register time.Duration) (p, d *testEngine, bootstrap string) {
	t.Helper()
	cfg := fastCfg()
	cfg.PrefillTokenUs, cfg.TokenBudget, cfg.KVConnector, cfg.MooncakeAbortTimeout = 20, 8192, KVConnectorMooncake, abort
	pc, dc := cfg, cfg
	pc.KVRole, pc.BootstrapAddr, pc.MooncakeRegisterDelay = KVRoleProducer, "127.0.0.1:0", register
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

func getQuery(t *testing.T, bootstrap string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(bootstrap + "/query")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// golden is the conformance values of producer p: its engine id, its
// worker's address (the bootstrap server's host:port, where the sim serves
// its side channel), its bootstrap server, and a request id.
func golden(p *testEngine, requestID string) conformance.Mooncake {
	return conformance.Mooncake{EngineID: p.e.moon.engineID, WorkerAddr: "tcp://" + p.e.BootstrapAddr(),
		BootstrapAddr: "http://" + p.e.BootstrapAddr(), RequestID: requestID}
}

// TestMooncakeQueryConformance: GET /query answers exactly vLLM 0.18.1's
// bytes: {} before the worker registered (200, never 503), then the
// worker's entry keyed by DP rank; POST /register takes the worker once and
// refuses it twice, as vLLM's bootstrap server does.
func TestMooncakeQueryConformance(t *testing.T) {
	p, _, boot := mooncakePair(t, 30*time.Second, time.Hour) // the test registers the worker itself
	status, body := getQuery(t, boot)
	if want := conformance.MooncakeBody(conformance.MooncakeQueryUnregistered, conformance.Mooncake{}); status != 200 || !bytes.Equal(body, want) {
		t.Fatalf("GET /query before registration: %d %q, want 200 %q", status, body, want)
	}
	g := golden(p, "")
	reg := `{"engine_id": "` + g.EngineID + `", "dp_rank": 0, "tp_rank": 0, "pp_rank": 0, "addr": "` + g.WorkerAddr + `"}`
	for k, want := range []int{200, 400} {
		resp, err := http.Post(boot+"/register", "application/json", strings.NewReader(reg))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST /register #%d: %d, want %d", k+1, resp.StatusCode, want)
		}
	}
	status, body = getQuery(t, boot)
	if want := conformance.MooncakeBody(conformance.MooncakeQueryRegistered, g); status != 200 || !bytes.Equal(body, want) {
		t.Fatalf("GET /query after registration:\n got %d %s\nwant 200 %s", status, body, want)
	}
	if resp, err := http.Get(boot + "/nothing"); err != nil || resp.StatusCode != 404 {
		t.Errorf("GET /nothing on the bootstrap server: %v %v, want 404", resp, err)
	}
}

// TestMooncakeWorkerRegisters: a producer's worker registers on its own
// after the register delay; until then /query is {}.
func TestMooncakeWorkerRegisters(t *testing.T) {
	p, _, boot := mooncakePair(t, 30*time.Second, 0)
	waitFor(t, func() bool { _, b := getQuery(t, boot); return string(b) != "{}" }, "the worker to register")
	if _, b := getQuery(t, boot); !bytes.Equal(b, conformance.MooncakeBody(conformance.MooncakeQueryRegistered, golden(p, ""))) {
		t.Errorf("GET /query: %s", b)
	}
}

// legs are the two legs' bodies of prompt, their kv_transfer_params the
// golden ones for producer p and request id rid.
func legs(p *testEngine, prompt, rid string) (pBody, dBody string) {
	g := golden(p, rid)
	pBody = `{"prompt": ` + prompt + `, "max_tokens": 1, "ignore_eos": true, "stream": false, "kv_transfer_params": ` +
		string(conformance.MooncakeBody(conformance.MooncakePrefillParams, g)) + `}`
	dBody = `{"prompt": ` + prompt + `, "max_tokens": 4, "ignore_eos": true, "kv_transfer_params": ` +
		string(conformance.MooncakeBody(conformance.MooncakeDecodeParams, g)) + `}`
	return pBody, dBody
}

// TestMooncakeBootstrapHandoff: vLLM's bootstrap protocol between a
// producer and a consumer sim, the legs' kv_transfer_params the golden
// ones, in either order. The legs pair by transfer_id, not by request id
// (each leg here has an X-Request-Id of its own). The producer's answer
// carries no kv_transfer_params; the consumer, told the bootstrap server
// and engine, pulls the prompt's full blocks (external hits), pays the
// modelled transfer and decodes; the producer frees the held blocks once
// sent.
func TestMooncakeBootstrapHandoff(t *testing.T) {
	const n = 2000
	full := float64((n - 1) / 16 * 16)
	p, d, _ := mooncakePair(t, 30*time.Second, 0)
	for k, decodeFirst := range []bool{false, true} {
		pBody, dBody := legs(p, idsPrompt(n, 10000*(k+1)), "rid-"+itoa(k))
		type res struct {
			status int
			body   string
			err    error
		}
		dres := make(chan res, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a decode that never gets its KV waits
		defer cancel()
		sendD := func() {
			go func() { s, b, err := postLeg(ctx, d.url, "decode-"+itoa(k), dBody); dres <- res{s, b, err} }()
		}
		if decodeFirst {
			sendD()
			waitFor(t, func() bool { return p.e.moon.pending() == 1 }, "the consumer's pull to reach the producer")
		}
		status, body, err := postLeg(ctx, p.url, "prefill-"+itoa(k), pBody)
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
// lacks one of the three fields the release requires, waits — as vLLM's
// does — until its client gives up (counted in mbench_sim_waiting_remote_kv
// meanwhile); a prefill leg whose decode never asks holds its blocks until
// the abort timeout, and one without a transfer_id holds none.
func TestMooncakeUnpaired(t *testing.T) {
	p, d, _ := mooncakePair(t, 300*time.Millisecond, 0)
	_, lonely := legs(p, idsPrompt(200, 7), "lonely")
	for _, body := range []string{
		lonely,
		strings.Replace(lonely, `"transfer_id"`, `"remote_dp_rank":0,"other"`, 1), // the PR branch's decode leg: no transfer_id
		strings.Replace(lonely, `"remote_engine_id"`, `"other"`, 1),
		`{"prompt": ` + idsPrompt(200, 7) + `, "max_tokens": 2, "kv_transfer_params": {"do_remote_prefill": true, "remote_host": "127.0.0.1", "remote_port": 1, "remote_engine_id": "x"}}`, // NIXL-style
	} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, _, err := postLeg(ctx, d.url, "lonely", body)
			done <- err
		}()
		waitFor(t, func() bool { return d.metrics(t)["mbench_sim_waiting_remote_kv"] == 1 }, "the decode leg to wait for remote KV")
		select {
		case err := <-done:
			t.Fatalf("%s: the decode leg ended (%v) while its KV never came", body, err)
		case <-time.After(400 * time.Millisecond): // past the producer's abort timeout: still waiting
		}
		cancel()
		<-done
		waitFor(t, func() bool { return d.metrics(t)["mbench_sim_waiting_remote_kv"] == 0 }, "the abandoned decode leg to go")
	}
	free := p.metrics(t)["vllm:kv_cache_usage_perc"]
	noXfer := `{"prompt": ` + idsPrompt(4000, 98) + `, "max_tokens": 1, "ignore_eos": true, "kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false}}`
	if status, body, err := postLeg(context.Background(), p.url, "no-xfer", noXfer); err != nil || status != 200 {
		t.Fatalf("prefill leg without transfer_id: %d %s %v", status, body, err)
	}
	if used, held := p.metrics(t)["vllm:kv_cache_usage_perc"], p.e.moon.pending(); used != free || held != 0 {
		t.Fatalf("after a prefill leg without transfer_id: KV usage %v (before %v), %d held; want nothing held", used, free, held)
	}
	pBody, _ := legs(p, idsPrompt(4000, 99), "no-decode")
	if status, body, err := postLeg(context.Background(), p.url, "no-decode", pBody); err != nil || status != 200 {
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

// pending is the number of requests the producer tracks for a decode:
// held for one, or asked for by one ahead of its prefill.
func (m *mooncake) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sends)
}
