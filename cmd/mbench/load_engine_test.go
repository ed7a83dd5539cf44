package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/openloop/stub"
)

// TestLoadReadsEngineMetrics: against the simulated engine, a load run
// with vLLM's prefix_repetition dataset reads /metrics into prefix_cache as
// a sweep does, its hits those the responses' usage reports (the engine's
// two accounts of one cache), and says it was simulated.
func TestLoadReadsEngineMetrics(t *testing.T) {
	t.Parallel()
	url := serveSimInProcess(t, fastSim(4096))
	out := filepath.Join(t.TempDir(), "load")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, stderr, err := runCLI(t, ctx, "load", "--base-url", url, "--dataset-name", "prefix_repetition",
		"--prefix-repetition-prefix-len", "64", "--prefix-repetition-suffix-len", "16", "--prefix-repetition-num-prefixes", "2",
		"--prefix-repetition-output-len", "4", "--num-prompts", "24", "--max-concurrency", "1", "--disable-tqdm", "--out", out)
	if err := ranToEnd(t, err, out); err != nil {
		t.Fatalf("load: %v\n%s", err, stderr)
	}
	data, err := os.ReadFile(filepath.Join(out, "summary_A.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Simulated   bool   `json:"simulated"`
		Engine      string `json:"engine"`
		PrefixCache *struct {
			Targets int     `json:"targets"`
			Hits    float64 `json:"hits"`
			Queries float64 `json:"queries"`
		} `json:"prefix_cache"`
		ResponseCache *struct {
			CachedTokens int64 `json:"cached_tokens"`
			PromptTokens int64 `json:"prompt_tokens"`
		} `json:"response_cache"`
		Load struct {
			InputLen, PrefixLen, NumPrefixes int
		}
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if !s.Simulated || s.Engine != "sim" {
		t.Errorf("simulated %v, engine %q against mbench sim", s.Simulated, s.Engine)
	}
	if s.PrefixCache == nil || s.PrefixCache.Targets != 1 {
		t.Fatalf("no prefix_cache from /metrics: %+v\n%s", s.PrefixCache, stderr)
	}
	if s.PrefixCache.Queries != 24*80 || !(s.PrefixCache.Hits > 0) {
		t.Errorf("prefix_cache queries %v hits %v; want 24 prompts of 80 tokens, some of each prefix cached", s.PrefixCache.Queries, s.PrefixCache.Hits)
	}
	if s.ResponseCache != nil && float64(s.ResponseCache.CachedTokens) != s.PrefixCache.Hits {
		t.Errorf("/metrics hits %v, the responses' cached_tokens %d", s.PrefixCache.Hits, s.ResponseCache.CachedTokens)
	}
}

// TestLoadInterrupted: a load run cancelled (Ctrl-C) mid-run exits 130,
// says the load stopped, and leaves what it measured.
func TestLoadInterrupted(t *testing.T) {
	t.Parallel()
	srv, err := stub.Start(stub.Options{Tokens: 4, FirstToken: 20 * time.Millisecond, Gap: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "load")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := runCLI(t, ctx, "load", "--base-url", srv.URL, "--model", "stub-model", "--random-input-len", "8",
			"--random-output-len", "4", "--num-prompts", "100000", "--request-rate", "50", "--disable-tqdm", "--out", out)
		done <- err
	}()
	for { // cancel once requests are being recorded
		if fi, err := os.Stat(filepath.Join(out, "requests.jsonl")); err == nil && fi.Size() > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	err = <-done
	if exitStatus(err) != exitInterrupted || !strings.Contains(err.Error(), "the load stopped") || strings.Contains(err.Error(), "sweep") {
		t.Fatalf("%v (exit %d); want exit 130 saying the load stopped", err, exitStatus(err))
	}
	if _, err := os.Stat(filepath.Join(out, "summary_A.json")); err != nil {
		t.Errorf("no summary of what was measured: %v", err)
	}
}

// TestVLLMRampOver: a ramp given in vLLM's names lasts as long as the
// expected arrivals of the ramp take to reach --num-prompts: ∫rate over
// the ramp equals n, for linear and exponential ramps.
func TestVLLMRampOver(t *testing.T) {
	for _, c := range []struct {
		kind   openloop.RampKind
		r0, r1 float64
		n      int
	}{{openloop.RampLinear, 0, 10, 100}, {openloop.RampLinear, 2, 8, 50}, {openloop.RampExponential, 1, 16, 200}, {openloop.RampExponential, 5, 5, 20}} {
		d := rampOver(c.kind, c.r0, c.r1, c.n).Seconds()
		const steps = 100000
		var sum float64
		for i := range steps { // midpoint rule
			x := (float64(i) + 0.5) / steps
			rate := c.r0 + (c.r1-c.r0)*x
			if c.kind == openloop.RampExponential {
				rate = c.r0 * math.Pow(c.r1/c.r0, x)
			}
			sum += rate * d / steps
		}
		if math.Abs(sum-float64(c.n)) > 1e-3*float64(c.n) {
			t.Errorf("%v %g→%g over %.3f s: %.3f expected arrivals, want %d", c.kind, c.r0, c.r1, d, sum, c.n)
		}
	}
	if rampOver(openloop.RampExponential, 0, 10, 100) != 0 || rampOver(openloop.RampLinear, 0, math.Inf(1), 100) != 0 {
		t.Error("a ramp that cannot be run got a duration")
	}
}

// TestPeakOutput: vLLM's max_output_tokens_per_s and
// max_concurrent_requests, counted by hand over one-second buckets from
// the first send.
func TestPeakOutput(t *testing.T) {
	const s = int64(time.Second)
	rec := func(sent, first int64, itl []float64, done int64) openloop.Record {
		return openloop.Record{Phase: openloop.PhaseMeasure, Status: openloop.StatusOK, SentNs: sent, FirstTokenNs: first, ITLMs: itl, DoneNs: done}
	}
	res := &openloop.Result{Records: []openloop.Record{
		rec(s, s+s/10, []float64{100, 100, 1000}, 3*s),                                                          // tokens at 1.1, 1.2, 1.3, 2.3 s: buckets 0,0,0,1; active 0..2
		rec(s+s/2, 2*s+s/10, []float64{50, 50}, 2*s+s/2),                                                        // tokens at 2.1, 2.15, 2.2: bucket 1; active 0..1
		rec(3*s+s/2, 3*s+s/2+1, nil, 4*s),                                                                       // one token at 3.5: bucket 2; active 2..3 (seconds from the first send, 1 s)
		{Phase: openloop.PhaseWarmup, Status: openloop.StatusOK, SentNs: s, FirstTokenNs: s + 1, DoneNs: 9 * s}, // not measured
		{Phase: openloop.PhaseMeasure, Status: openloop.StatusError, SentNs: s, DoneNs: 9 * s},                  // failed
	}}
	tok, conc := peakOutput(res)
	if tok != 4 || conc != 2 { // active per second: 2, 2, 2, 1; tokens 3, 4, 1, 0
		t.Errorf("peak %v tok/s, %d concurrent; want 4 (second 1: 1+3 tokens) and 2", tok, conc)
	}
}

// FuzzLoadFlagParsers: the parsers of mbench load's own syntax never
// panic.
func FuzzLoadFlagParsers(f *testing.F) {
	for _, s := range []string{`{"input": 0.3, "output": 0.5}`, "0.2", "--goodput ttft:1 tpot:2", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if rin, rout, err := rangeRatio(s); err == nil && !(rin >= 0 && rin < 1 && rout >= 0 && rout < 1) {
			t.Fatalf("rangeRatio(%q) = %v, %v", s, rin, rout)
		}
		args := append([]string{"mbench", "load"}, strings.Fields(s)...)
		if out := expandNargs(args); len(out) < len(args) {
			t.Fatalf("expandNargs(%q) lost arguments: %q", args, out)
		}
	})
}
