package simengine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out bytes.Buffer
	err = ListenAndServe(ctx, Config{Addr: addr}, &out)
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("err = %v, want an error naming %s and saying it is in use", err, addr)
	}
	if out.Len() != 0 {
		t.Errorf("printed %q before failing to listen", out.String())
	}
}

func TestListenAndServeBannerAndShutdown(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- ListenAndServe(ctx, Config{Addr: addr, StepBaseUs: 5000}, pw); pw.Close() }()
	line := make([]byte, 512)
	n, _ := pr.Read(line)
	go io.Copy(io.Discard, pr)
	if !strings.Contains(string(line[:n]), Banner) || !strings.Contains(string(line[:n]), addr) {
		t.Fatalf("banner %q lacks %q and the address", line[:n], Banner)
	}
	// A stream in flight must not hold up the shutdown.
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":[1],"max_tokens":100000,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	time.Sleep(20 * time.Millisecond)
	t0 := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ListenAndServe after cancel: %v", err)
		}
	case <-time.After(time.Minute): // a hang: the stream's own end is 100,000 steps of 5 ms away
		t.Fatalf("no shutdown %v after the cancel", time.Since(t0))
	}
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "shutting down") || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Errorf("in-flight stream ended with %q, want an error event and [DONE]", tail(string(b)))
	}
}

func TestClientDisconnectAborts(t *testing.T) {
	te := startEngine(t, Config{StepBaseUs: 1000, Jitter: -1})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", te.url+"/v1/completions",
		strings.NewReader(`{"prompt":`+idsPrompt(64, 0)+`,"max_tokens":100000,"ignore_eos":true,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	if _, err := io.ReadAtLeast(resp.Body, buf, 10); err != nil {
		t.Fatal(err)
	}
	if m := te.metrics(t); m["vllm:num_requests_running"] != 1 || m["vllm:kv_cache_usage_perc"] == 0 {
		t.Fatalf("while streaming: %v", m)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		m := te.metrics(t)
		if m["vllm:num_requests_running"] == 0 && m["vllm:kv_cache_usage_perc"] == 0 && m["mbench_sim_aborted_requests_total"] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("request not aborted 2 s after the client left: %v", m)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCrashInjection(t *testing.T) {
	te := startEngine(t, Config{StepBaseUs: 200, Jitter: -1, CrashAfterSteps: 5})
	var stderr bytes.Buffer
	te.e.stderr = &stderr
	status, out := te.post(t, `{"prompt":[1,2],"max_tokens":50,"ignore_eos":true,"stream":true}`)
	select {
	case <-te.e.crashed:
	case <-time.After(time.Minute): // a hang's bound
		t.Fatal("no crash after 5 steps")
	}
	if ce := (&CrashError{Steps: 5}); ce.ExitCode() != 3 || ce.Error() != "sim: injected crash after 5 steps" {
		t.Errorf("crash error %q exits %d, want 3", ce, ce.ExitCode())
	}
	if status != 200 || !strings.Contains(out, "crashed") {
		t.Errorf("the stream in flight should end with an error: %d %q", status, tail(out))
	}
	if got := stderr.String(); got != "sim: injected crash after 5 steps\n" {
		t.Errorf("stderr %q", got)
	}
	if steps := readSteps(t, te.stepLog); len(steps) != 5 { // flushed before the exit
		t.Errorf("step log has %d lines at the exit, want 5", len(steps))
	}
	te.expectCrash = true // Serve returns the *CrashError that makes `mbench sim` exit 3
	te.stop()
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Connector: "mooncake"}, `connector: unknown "mooncake"`},
		{Config{ConnectorUs: 16}, "ignores connector-us"},
		{Config{Connector: "constant", WalkNsPerBlock: 3}, "walk-ns-per-block: only used with --connector walk"},
		{Config{KVBlocks: -1}, "kv-blocks: -1 is invalid"},
		{Config{Noise: -0.1}, "noise: -0.1 is invalid"},
		{Config{ColdFactor: -2}, "cold-factor"},
		{Config{KVBlocks: 4, BlockSize: 4, MaxModelLen: 17}, "max-model-len: 17 exceeds"},
		{Config{CrashAfterSteps: -1}, "crash-after-steps"},
		{Config{StepBaseUs: -1, DecodeSeqUs: -1}, "every step must take time"},
		{Config{}, ""},
		{Config{Connector: "walk", ConnectorUs: 16, WalkNsPerBlock: 20, Async: true}, ""},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
		if _, nerr := New(tc.cfg); (nerr == nil) != (err == nil) {
			t.Errorf("New and Validate disagree: %v vs %v", nerr, err)
		}
	}
	_, err := New(Config{StepLog: "/nonexistent-dir/x.jsonl"})
	if err == nil || !errors.Is(err, errNotExist()) {
		t.Errorf("New with an unwritable step log: %v", err)
	}
}

func TestIdleEngineLogsNothing(t *testing.T) {
	te := startEngine(t, Config{StepBaseUs: 200, Jitter: -1})
	time.Sleep(30 * time.Millisecond)
	if n := te.metrics(t)["mbench_sim_steps_total"]; n != 0 {
		t.Fatalf("%v steps before any request", n)
	}
	te.post(t, `{"prompt":[1,2],"max_tokens":3,"ignore_eos":true}`)
	before := te.metrics(t)["mbench_sim_steps_total"]
	time.Sleep(30 * time.Millisecond)
	if after := te.metrics(t)["mbench_sim_steps_total"]; before != 3 || after != before {
		t.Fatalf("steps %v after the request, %v 30 ms later; want 3 and no more while idle", before, after)
	}
	if steps := te.steps(t); len(steps) != 3 {
		t.Fatalf("%d lines logged, want 3", len(steps))
	}
}
