package router

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/simtest"
)

func breakdown(t *testing.T, u string) Breakdown {
	t.Helper()
	resp, err := http.Get(u + "/breakdown")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b Breakdown
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCacheFromEngine: with --cache-blocks auto the router bounds each
// instance's prefix index to the KV capacity the engine reports
// (vllm:cache_config_info), and its cached-token estimate then agrees with
// the engine's own per-request count, where an unbounded index overstates
// it once the engine has evicted (checked against the sim's
// usage.prompt_tokens_details.cached_tokens).
func TestCacheFromEngine(t *testing.T) {
	c := fastSim()
	c.KVBlocks, c.PromptTokensDetails = 128, true // 2048 tokens: two 900-token prompts fit, three do not
	run := func(o Options) Breakdown {
		sim := simtest.Start(t, c)
		u, log := startRouter(t, []string{sim}, nil, o)
		if o.CacheFromEngine {
			waitFor(t, func() bool { return breakdown(t, u).Instances[0].IndexBlocks > 0 }, "the router to read the engine's KV capacity")
		}
		var n int
		for round := range 3 {
			for k := range 3 {
				p, _ := json.Marshal(prompt(uint64(10+k), 0, 900))
				if status, body := post(t, u, `{"prompt": `+string(p)+`, "max_tokens": 1, "stream": true, "stream_options": {"include_usage": true}}`); status != 200 {
					t.Fatalf("round %d request %d: %d %s", round, k, status, body)
				}
				n++
			}
		}
		waitEntries(t, log, n)
		return breakdown(t, u)
	}
	bounded, unbounded := run(Options{Policy: Sticky, CacheFromEngine: true}), run(Options{Policy: Sticky})
	if got := bounded.Instances[0].IndexBlocks; got != 128*16/16 {
		t.Errorf("index bounded to %d blocks, want the engine's 2048 tokens / 16", got)
	}
	b, u := bounded.CacheEstimate, unbounded.CacheEstimate
	if b.Requests != 9 || u.Requests != 9 {
		t.Fatalf("checked %d and %d requests, want 9 each (every request reported its cached tokens)", b.Requests, u.Requests)
	}
	// Cycling three prompts through a cache that holds two: the engine
	// hits nothing after the first round (LRU), the unbounded index
	// believes every repeat cached.
	if u.OverEstimated < 6 || u.MeanAbsErr < 300 || u.EstTokens < 3*u.EngineTokens {
		t.Errorf("unbounded index: %+v, want the repeats over-estimated by hundreds of tokens", u)
	}
	if b.MeanAbsErr > u.MeanAbsErr/10 || b.WithinBlock != 9 {
		t.Errorf("bounded index: %+v against unbounded %+v: want its estimate within a block of the engine's for most requests", b, u)
	}
}

// TestEngineLoad: with --load engine (LMetric's default) the router places
// by the engines' own waiting + running counts, which see load the router
// did not send; the shadow state does not.
func TestEngineLoad(t *testing.T) {
	slow := fastSim()
	slow.DecodeSeqUs = 20000 // 20 ms per decode step: requests stay in flight
	busy, idle := simtest.Start(t, slow), simtest.Start(t, slow)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for k := range 4 { // load on busy the router does not know of
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, busy+"/v1/completions",
				strings.NewReader(`{"prompt": [`+itoa(k)+`, 1, 2], "max_tokens": 5000, "ignore_eos": true, "stream": true}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body) // in flight until the test ends
				resp.Body.Close()
			}
		}()
	}
	for _, o := range []Options{{Policy: Sticky, Load: LoadEngine}, {Policy: Sticky, Load: LoadShadow}, {Policy: LMetric}} {
		load := o.Load
		if load == "" {
			load = LoadEngine // LMetric's default
		}
		u, log := startRouter(t, []string{busy, idle}, nil, o)
		if load == LoadEngine {
			var l []int
			waitFor(t, func() bool {
				l = breakdown(t, u).EngineLoad
				lastWait = l
				return len(l) == 2 && l[0] >= 4 && l[1] == 0
			},
				"the router to see the engines' loads")
		}
		for k := range 4 {
			req, _ := http.NewRequest(http.MethodPost, u+"/v1/completions", strings.NewReader(`{"prompt": [9, 9, `+itoa(k)+`], "max_tokens": 1}`))
			req.Header.Set("X-Mbench-Session", string(o.Policy)+string(load)+itoa(k))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		onIdle := 0
		for _, e := range waitEntries(t, log, 4) {
			if e.Instance == 1 {
				onIdle++
			}
		}
		if want := map[LoadSource]int{LoadEngine: 4, LoadShadow: 2}[load]; onIdle != want {
			t.Errorf("%s, load %s: %d of 4 new sessions placed on the idle engine, want %d", o.Policy, load, onIdle, want)
		}
	}
}
