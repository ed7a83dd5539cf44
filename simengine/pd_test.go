package simengine

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestPDHandoff: vLLM's disaggregated-prefill protocol between a kv_producer
// and a kv_consumer sim. The producer prefills and answers with
// kv_transfer_params naming itself; the consumer given them computes only
// the prompt's last block (the full blocks count as external hits), pays the
// modelled transfer, decodes, and keeps the received blocks in its prefix
// cache.
func TestPDHandoff(t *testing.T) {
	const (
		n         = 4000
		perToken  = 40.0 // µs of prefill per token on both: 160 ms for the whole prompt
		transfer  = 10.0 // µs per transferred token: 40 ms
		fullBlock = (n - 1) / 16 * 16
	)
	cfg := fastCfg()
	cfg.PrefillTokenUs, cfg.TokenBudget = perToken, 8192
	pc, dc := cfg, cfg
	pc.KVRole, dc.KVRole, dc.KVTransferUsPerToken = KVRoleProducer, KVRoleConsumer, transfer
	p, d := startEngine(t, pc), startEngine(t, dc)
	prompt := idsPrompt(n, 1000)
	status, body := p.post(t, `{"prompt": `+prompt+`, "max_tokens": 1, "stream": false, "kv_transfer_params": `+
		`{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null, "remote_block_ids": null, "remote_host": null, "remote_port": null}}`)
	if status != 200 {
		t.Fatalf("prefill: %d %s", status, body)
	}
	var ans struct {
		KV struct {
			DoRemotePrefill bool    `json:"do_remote_prefill"`
			BlockIDs        []int32 `json:"remote_block_ids"`
			Host            string  `json:"remote_host"`
			Port            int     `json:"remote_port"`
			EngineID        string  `json:"remote_engine_id"`
		} `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal([]byte(body), &ans); err != nil || !ans.KV.DoRemotePrefill || len(ans.KV.BlockIDs) != (n+15)/16 ||
		ans.KV.Host != "127.0.0.1" || !strings.HasSuffix(p.url, ":"+itoa(ans.KV.Port)) {
		t.Fatalf("prefill answer %s (%v): want kv_transfer_params naming %s and its %d blocks", body, err, p.url, (n+15)/16)
	}
	kv, _ := json.Marshal(ans.KV)
	decode := `{"prompt": ` + prompt + `, "max_tokens": 8, "ignore_eos": true, "stream": true, "kv_transfer_params": ` + string(kv) + `}`
	payloads, at := streamTimes(t, d.url, decode)
	if len(payloads) < 9 {
		t.Fatalf("decode stream: %d payloads", len(payloads))
	}
	ttft := at[0]
	// The consumer waits for the modelled transfer (40 ms) before its first
	// token; that it then computes 16 tokens at most, not 4000 (no 160 ms
	// prefill), the metrics below say.
	if lo := time.Duration(fullBlock*transfer) * time.Microsecond; ttft < lo {
		t.Errorf("decode TTFT %v, want ≥ %v (the modelled transfer)", ttft, lo)
	}
	pm, dm := p.metrics(t), d.metrics(t)
	if pm["vllm:prompt_tokens_total"] != n || pm["vllm:external_prefix_cache_hits_total"] != 0 {
		t.Errorf("producer metrics: prompt %v, external hits %v", pm["vllm:prompt_tokens_total"], pm["vllm:external_prefix_cache_hits_total"])
	}
	if dm["vllm:external_prefix_cache_hits_total"] != fullBlock || dm["vllm:external_prefix_cache_queries_total"] != n ||
		dm["vllm:prefix_cache_hits_total"] != 0 || dm["vllm:generation_tokens_total"] != 8 {
		t.Errorf("consumer metrics: external %v/%v, local hits %v, generated %v; want %d/%d, 0, 8",
			dm["vllm:external_prefix_cache_hits_total"], dm["vllm:external_prefix_cache_queries_total"],
			dm["vllm:prefix_cache_hits_total"], dm["vllm:generation_tokens_total"], fullBlock, n)
	}
	// The received KV is in the consumer's prefix cache now.
	if status, body := d.post(t, `{"prompt": `+prompt+`, "max_tokens": 1}`); status != 200 {
		t.Fatalf("second request: %d %s", status, body)
	}
	if got := d.metrics(t)["vllm:prefix_cache_hits_total"]; got != fullBlock {
		t.Errorf("consumer local hits after the handoff: %v, want %d", got, fullBlock)
	}
}

func TestPDRefusals(t *testing.T) {
	plain := startEngine(t, fastCfg())
	cfg := fastCfg()
	cfg.KVRole = KVRoleProducer
	prod := startEngine(t, cfg)
	for _, tc := range []struct {
		te   *testEngine
		kv   string
		want string
	}{
		{plain, `{"do_remote_decode": true}`, "no KV connector"},
		{prod, `{"do_remote_prefill": true, "remote_engine_id": "x", "remote_host": "h", "remote_port": 1}`, "kv_producer"},
		{prod, `{"do_remote_decode": true, "do_remote_prefill": true}`, "both set"},
		{prod, `{"do_remote_decode": "yes"}`, "kv_transfer_params"},
	} {
		status, body := tc.te.post(t, `{"prompt": [1,2,3], "max_tokens": 1, "kv_transfer_params": `+tc.kv+`}`)
		if status != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want 400 naming %q", tc.kv, status, body, tc.want)
		}
	}
	if _, ok := plain.metrics(t)["vllm:external_prefix_cache_queries_total"]; ok {
		t.Error("a sim without a KV role reports external prefix cache metrics")
	}
	if err := (Config{KVRole: "kv_sender"}).Validate(); err == nil || !strings.Contains(err.Error(), "kv-role") {
		t.Errorf("bad kv role: %v", err)
	}
}

// TestPDPrefillEOS: a NixlConnector prefill leg without ignore_eos whose one
// token is EOS finishes stopped, and its answer carries no
// kv_transfer_params (vLLM's NixlConnector returns none unless the request
// finished length-capped); a length-capped one carries them. Over 1,000
// prefills (a pseudo-EOS has a 1 % chance per token) both occur.
func TestPDPrefillEOS(t *testing.T) {
	cfg := fastCfg()
	cfg.KVRole = KVRoleProducer
	p := startEngine(t, cfg)
	var stops, lengths int
	for k := range 1000 {
		status, body := p.post(t, `{"prompt": `+idsPrompt(20, 100*k)+`, "max_tokens": 1, "stream": false, "kv_transfer_params": {"do_remote_decode": true}}`)
		var ans struct {
			Choices []struct {
				Finish string `json:"finish_reason"`
			} `json:"choices"`
			KV json.RawMessage `json:"kv_transfer_params"`
		}
		if err := json.Unmarshal([]byte(body), &ans); status != 200 || err != nil || len(ans.Choices) != 1 {
			t.Fatalf("prefill %d: %d %s %v", k, status, body, err)
		}
		switch f := ans.Choices[0].Finish; {
		case f == "stop" && ans.KV == nil:
			stops++
		case f == "length" && ans.KV != nil:
			lengths++
		default:
			t.Fatalf("prefill %d finished %q with kv_transfer_params %s: want them exactly when length-capped", k, f, ans.KV)
		}
	}
	if stops == 0 || lengths == 0 {
		t.Errorf("%d stopped, %d length-capped prefills: want both", stops, lengths)
	}
}
