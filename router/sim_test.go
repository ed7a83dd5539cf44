package router

// End to end on the simulated engine: a sampled real-format (Mooncake) trace
// replayed through the router over several sims; prefix hit rates are read
// from the sims' /metrics and compared with figures computed here from the
// trace alone.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/longrun"
	"github.com/mbench/mbench/internal/simtest"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/simengine"
)

type traceLine struct {
	Timestamp    float64 `json:"timestamp"`
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
	SessionID    string  `json:"session_id,omitempty"`
}

// conversationTrace writes a trace shaped like Mooncake's conversation
// trace (no session_id, block 0 shared by every request, each turn extending
// its conversation's chain) and returns its path.
func conversationTrace(t *testing.T, seed uint64, convs, maxNew int) string {
	r := rand.New(rand.NewPCG(seed, 3))
	next := int64(1)
	var lines []traceLine
	for range convs {
		ts := r.Float64() * 20_000
		chain := []int64{0}
		for range 2 + r.IntN(5) {
			for range 1 + r.IntN(maxNew) {
				chain = append(chain, next)
				next++
			}
			lines = append(lines, traceLine{Timestamp: math.Round(ts), InputLength: 512*len(chain) - r.IntN(200),
				OutputLength: 2 + r.IntN(6), HashIDs: slices.Clone(chain)})
			ts += 500 + r.Float64()*3000
		}
	}
	slices.SortStableFunc(lines, func(a, b traceLine) int { return int(a.Timestamp - b.Timestamp) })
	var b bytes.Buffer
	for _, l := range lines {
		j, _ := json.Marshal(l)
		b.Write(append(j, '\n'))
	}
	p := filepath.Join(t.TempDir(), "big.jsonl")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// sampleTrace samples whole inferred sessions of the trace at path.
func sampleTrace(t *testing.T, path string, n int, seed int64) (string, []traceLine) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	if _, err := openloop.SampleTraceWith(context.Background(), f, &out, openloop.SampleOptions{Requests: n, Seed: seed}); err != nil {
		t.Fatal(err)
	}
	var lines []traceLine
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	for dec.More() {
		var l traceLine
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	p := filepath.Join(t.TempDir(), "sample.jsonl")
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, lines
}

// idealTokens is the token hit rate of one infinite prefix cache of 16-token
// blocks over the trace, requests in timestamp order: leading 512-token trace
// blocks seen before hit, never the prompt's last token, in whole 16-token
// blocks (the sim's).
func idealTokens(lines []traceLine) float64 {
	seen := map[int64]bool{}
	var hit, total int
	for _, l := range lines {
		k := 0
		for k < len(l.HashIDs) && seen[l.HashIDs[k]] {
			k++
		}
		h := min(k*512, l.InputLength-1) / 16 * 16
		hit += h
		total += l.InputLength
		for _, id := range l.HashIDs {
			seen[id] = true
		}
	}
	return float64(hit) / float64(total)
}

func startRouter(t *testing.T, targets, producers []string, o Options) (string, *Log) {
	t.Helper()
	return startRouterWith(t, targets, producers, o, ServerOptions{})
}

// startRouterWith is startRouter with server options (a protocol).
func startRouterWith(t *testing.T, targets, producers []string, o Options, so ServerOptions) (string, *Log) {
	t.Helper()
	r, err := New(targets, producers, o)
	if err != nil {
		t.Fatal(err)
	}
	log := NewLog(nil)
	srv, err := NewServer(r, log, so)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), log
}

func fastSim() simengine.Config {
	return simengine.Config{StepBaseUs: 300, PrefillTokenUs: 0.02, DecodeSeqUs: 5, Jitter: -1, KVBlocks: 1 << 15, TokenBudget: 8192, Seed: 1}
}

// replay runs the trace through url and returns the per-instance prefix
// cache summaries of the sims (from /metrics deltas).
func replay(t *testing.T, url string, sims []string, trace string) []probes.CacheSummary {
	cs, _ := replayCounted(t, url, sims, trace)
	return cs
}

// replayCounted is replay that also returns how many requests the sims
// finished in all (vllm:request_success_total deltas).
func replayCounted(t *testing.T, url string, sims []string, trace string) ([]probes.CacheSummary, float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	scrape := func() [][]probes.Scrape {
		out := make([][]probes.Scrape, len(sims))
		for i, s := range sims {
			sc, err := probes.ScrapeMetrics(ctx, nil, s+"/metrics")
			if err != nil {
				t.Fatal(err)
			}
			out[i] = []probes.Scrape{sc}
		}
		return out
	}
	before := scrape()
	res, err := openloop.Run(ctx, openloop.Config{Targets: []string{url}, Rate: 1, Seed: 3,
		Shape: openloop.Shape{Name: "trace", Trace: &openloop.Trace{Path: trace, TimeScale: 20}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Records {
		if !r.OK() {
			t.Fatalf("request %d failed: %s", r.ID, r.Error)
		}
	}
	after := scrape()
	out := make([]probes.CacheSummary, len(sims))
	done := 0.0
	for i := range sims {
		out[i] = probes.SummarizeMetrics(before[i], after[i], nil)
		done += after[i][0].Values["vllm:request_success_total"] - before[i][0].Values["vllm:request_success_total"]
	}
	return out, done
}

func pooled(cs []probes.CacheSummary) float64 {
	var h, q float64
	for _, c := range cs {
		h += c.Hits
		q += c.Queries
	}
	return h / q
}

// TestPoliciesOnSim: over a sampled conversation trace on 4 sims with caches
// that never evict, sticky and cache-aware routing reach the trace's ideal
// hit rate (less the shared block each instance must compute once), and
// round-robin stays far below it; every session stays on one instance.
func TestPoliciesOnSim(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end on the sim")
	}
	// The seeds' replays wait on the sims' steps, not on the cores: side
	// by side in a plain run, one after another in CI's long run.
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			longrun.Parallel(t)
			policiesOnSim(t, seed)
		})
	}
}

// policiesOnSim is TestPoliciesOnSim for one seed's trace.
func policiesOnSim(t *testing.T, seed uint64) {
	big := conversationTrace(t, seed, 120, 4)
	trace, lines := sampleTrace(t, big, 120, int64(seed))
	ideal := idealTokens(lines)
	sims := make([]string, 4)
	got := map[Policy]float64{}
	for _, pol := range Policies {
		// A fresh set of sims per policy: caches must start cold.
		for i := range sims {
			sims[i] = simtest.Start(t, fastSim())
		}
		// No load-aware override here (TestStickyOverride covers it): on
		// a starved machine it would move sessions, and the ideal below
		// assumes they stay.
		url, log := startRouter(t, sims, nil, Options{Policy: pol, OverrideFactor: 1000})
		got[pol] = pooled(replay(t, url, sims, trace))
		if pol != RoundRobin {
			home := map[string]int{}
			for _, e := range log.Entries() {
				if e.Reason == "override" {
					home[e.Session] = e.Instance
					continue
				}
				if h, ok := home[e.Session]; ok && e.Session != "" && h != e.Instance {
					t.Errorf("seed %d %s: session %s moved from %d to %d without an override", seed, pol, e.Session, h, e.Instance)
				}
				home[e.Session] = e.Instance
			}
		}
	}
	t.Logf("seed %d: %d requests, ideal %.4f; measured %v", seed, len(lines), ideal, got)
	for _, pol := range []Policy{Sticky, Linear, LMetric} {
		if got[pol] < ideal-0.06 || got[pol] > ideal+1e-9 {
			t.Errorf("seed %d: %s hit rate %.4f, want within 6 pp below the ideal %.4f", seed, pol, got[pol], ideal)
		}
		if got[pol]-got[RoundRobin] < 0.15 {
			t.Errorf("seed %d: %s hit rate %.4f, round-robin %.4f: want ≥ 15 pp more", seed, pol, got[pol], got[RoundRobin])
		}
	}
}
