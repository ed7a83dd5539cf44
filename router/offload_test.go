package router

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/simtest"
	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/simengine"
)

// heavyFirstTrace is a trace of conversations (with session ids) whose first
// turn is long (20-28 blocks: 10-14k new tokens, HEAVY at a 5000-token
// threshold) and whose later turns add one block (512 new tokens, WARM).
// It returns the path and the lines.
func heavyFirstTrace(t *testing.T, seed uint64, convs int) (string, []traceLine) {
	r := rand.New(rand.NewPCG(seed, 5))
	next := int64(1)
	var lines []traceLine
	for c := range convs {
		ts := r.Float64() * 8000
		chain := []int64{0}
		for turn := range 2 + r.IntN(3) {
			add := 1
			if turn == 0 {
				add = 19 + r.IntN(8)
			}
			for range add {
				chain = append(chain, next)
				next++
			}
			lines = append(lines, traceLine{Timestamp: ts, InputLength: 512*len(chain) - 100, OutputLength: 4,
				HashIDs: slices.Clone(chain), SessionID: "c" + itoa(c)})
			ts += 300 + r.Float64()*1000
		}
	}
	slices.SortStableFunc(lines, func(a, b traceLine) int { return int(a.Timestamp - b.Timestamp) })
	var b bytes.Buffer
	for _, l := range lines {
		j, _ := json.Marshal(l)
		b.Write(append(j, '\n'))
	}
	p := filepath.Join(t.TempDir(), "heavy.jsonl")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, lines
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func kvSim(role string) simengine.Config {
	c := fastSim()
	c.KVRole, c.KVTransferUsPerToken = role, 0.05
	return c
}

func sum(cs []probes.CacheSummary, f func(probes.CacheSummary) float64) float64 {
	s := 0.0
	for _, c := range cs {
		s += f(c)
	}
	return s
}

// firstTurns returns, per session, the prompt length of its first turn and
// the sum over first turns of their full 16-token blocks.
func firstTurns(lines []traceLine) (map[string]int, float64) {
	first := map[string]int{}
	full := 0.0
	for _, l := range lines {
		if _, ok := first[l.SessionID]; !ok {
			first[l.SessionID] = l.InputLength
			full += float64((l.InputLength - 1) / 16 * 16)
		}
	}
	return first, full
}

// waitEntries returns the log's entries once it holds n: the router logs a
// request when its proxied response has ended, which can be just after the
// client read the response's end.
func waitEntries(t *testing.T, log *Log, n int) []Entry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		entries := log.Entries()
		if len(entries) >= n || time.Now().After(deadline) {
			return entries
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOffloadOnSim: with elastic offload, exactly the HEAVY requests (the
// first turns, known from the trace) prefill on another instance and decode
// on their session's sticky instance; the sims' own counters agree: one
// extra (prefill) request per offload, and external hits for about the
// full blocks of every first turn.
func TestOffloadOnSim(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end on the sim")
	}
	for _, seed := range []uint64{1, 2} {
		trace, lines := heavyFirstTrace(t, seed, 24)
		sims := make([]string, 4)
		for i := range sims {
			sims[i] = simtest.Start(t, kvSim(simengine.KVRoleBoth))
		}
		url, log := startRouter(t, sims, nil, Options{Policy: Sticky, Offload: true, HeavyTokens: 5000, MaxOffload: 100, OverrideFactor: 100})
		cs, done := replayCounted(t, url, sims, trace)
		first, full := firstTurns(lines)
		home := map[string]int{}
		offloaded := 0
		entries := waitEntries(t, log, len(lines))
		for _, e := range entries {
			if _, seen := home[e.Session]; !seen {
				if e.PromptTokens != first[e.Session] {
					t.Fatalf("seed %d: session %s's first entry has %d tokens, its first turn %d", seed, e.Session, e.PromptTokens, first[e.Session])
				}
				if e.PrefillInstance == e.Instance || e.NewTokens <= 5000 {
					t.Errorf("seed %d: first turn of %s (%d tokens, %d new) not offloaded: %s", seed, e.Session, e.PromptTokens, e.NewTokens, e.Reason)
				}
				offloaded++
				home[e.Session] = e.Instance
				continue
			}
			if e.PrefillInstance != e.Instance || e.Class != Warm {
				t.Errorf("seed %d: a later turn of %s (class %s) offloaded: %s", seed, e.Session, e.Class, e.Reason)
			}
			if e.Instance != home[e.Session] {
				t.Errorf("seed %d: %s's offloaded first turn decoded on %d, its later turns on %d", seed, e.Session, home[e.Session], e.Instance)
			}
		}
		if len(entries) != len(lines) || offloaded != len(first) {
			t.Fatalf("seed %d: %d entries, %d offloaded; trace has %d lines, %d sessions", seed, len(entries), offloaded, len(lines), len(first))
		}
		if done != float64(len(lines)+len(first)) {
			t.Errorf("seed %d: the sims finished %v requests, want %d served + %d prefills", seed, done, len(lines), len(first))
		}
		ext := sum(cs, func(c probes.CacheSummary) float64 { return c.ExternalHits })
		if ext > full || ext < full-512*float64(len(first)) {
			t.Errorf("seed %d: external hits %v, want the first turns' full blocks %v less at most one shared block each", seed, ext, full)
		}
		t.Logf("seed %d: %d requests, %d offloaded, external hits %v of %v full first-turn tokens", seed, len(lines), offloaded, ext, full)
	}
}

// TestPDSeparatedOnSim: in a PD-separated topology every request prefills
// on a producer and decodes on a consumer; the consumers receive every
// prompt's KV (external hits) and the producers keep the sessions' prefixes.
func TestPDSeparatedOnSim(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end on the sim")
	}
	trace, lines := heavyFirstTrace(t, 3, 16)
	prod := []string{simtest.Start(t, kvSim(simengine.KVRoleProducer)), simtest.Start(t, kvSim(simengine.KVRoleProducer))}
	cons := []string{simtest.Start(t, kvSim(simengine.KVRoleConsumer)), simtest.Start(t, kvSim(simengine.KVRoleConsumer))}
	url, log := startRouter(t, cons, prod, Options{Policy: Linear, OverrideFactor: 100})
	all := append(slices.Clone(cons), prod...)
	cs, done := replayCounted(t, url, all, trace)
	entries := waitEntries(t, log, len(lines))
	if len(entries) != len(lines) {
		t.Errorf("%d requests logged, the trace has %d", len(entries), len(lines))
	}
	for _, e := range entries {
		if e.Instance >= len(cons) || e.PrefillInstance < len(cons) {
			t.Fatalf("request routed %d → %d: want a producer (≥ %d) then a consumer", e.PrefillInstance, e.Instance, len(cons))
		}
	}
	if done != float64(2*len(lines)) {
		t.Errorf("the sims finished %v requests, want %d prefills + %d decodes", done, len(lines), len(lines))
	}
	var l []traceLine
	l = append(l, lines...)
	ideal := idealTokens(l)
	p := cs[len(cons):]
	pHit := sum(p, func(c probes.CacheSummary) float64 { return c.Hits }) / sum(p, func(c probes.CacheSummary) float64 { return c.Queries })
	if pHit < ideal-0.06 {
		t.Errorf("producers' prefix hit rate %.4f, want near the ideal %.4f (sessions stick to a producer)", pHit, ideal)
	}
	// A consumer holds a prompt's full blocks after its decode: they arrive
	// as external hits or were already local.
	var fullAll float64
	for _, ln := range lines {
		fullAll += float64((ln.InputLength - 1) / 16 * 16)
	}
	c := cs[:len(cons)]
	got := sum(c, func(c probes.CacheSummary) float64 { return c.ExternalHits + c.Hits })
	if got != fullAll {
		t.Errorf("consumers' local + external hits %v, want every prompt's full blocks %v", got, fullAll)
	}
	t.Logf("PD: producers' hit rate %.4f (ideal %.4f); consumers' external hit rate %.4f", pHit, ideal,
		sum(c, func(c probes.CacheSummary) float64 { return c.ExternalHits })/sum(c, func(c probes.CacheSummary) float64 { return c.ExternalQueries }))
}
