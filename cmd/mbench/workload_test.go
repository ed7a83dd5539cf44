package main

// Issue 10 workloads driven end to end: openloop against the simulated engine,
// with the prefix-cache hit rate checked against a prediction computed here,
// independently of both (the shape's arithmetic; an LRU replay of hash_ids).

import (
	"bufio"
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/simtest"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/simengine"
)

const (
	simBlock   = 16  // tokens per sim KV block
	traceBlock = 512 // tokens per trace hash id
)

var syntheticTrace = filepath.Join("..", "..", "openloop", "testdata", "synthetic_trace.jsonl")

// serveSimInProcess serves a simulated engine on 127.0.0.1:0 until the test ends and
// returns its base URL.
func serveSimInProcess(t *testing.T, cfg simengine.Config) string { return simtest.Start(t, cfg) }

// fastSim is a sim whose steps cost little, so runs take seconds on a busy
// machine; kvBlocks sets the cache size.
func fastSim(kvBlocks int) simengine.Config {
	return simengine.Config{StepBaseUs: 400, PrefillTokenUs: 0.1, DecodeSeqUs: 5, Jitter: -1, KVBlocks: kvBlocks, Seed: 1}
}

// runWithCache runs cfg against base and returns the result and the cache
// summary of /metrics deltas around the run.
func runWithCache(t *testing.T, base string, cfg openloop.Config) (*openloop.Result, probes.CacheSummary) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	scrape := func() []probes.Scrape {
		s, err := probes.ScrapeMetrics(ctx, nil, base+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return []probes.Scrape{s}
	}
	before := scrape()
	cfg.Targets = []string{base}
	res, err := openloop.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("openloop.Run: %v", err)
	}
	for _, r := range res.Records {
		if !r.OK() {
			t.Fatalf("request %d failed: %s", r.ID, r.Error)
		}
	}
	cs := probes.SummarizeMetrics(before, scrape(), nil)
	if !cs.HitRateValid || cs.Preemptions != 0 {
		t.Fatalf("cache summary %+v: want a valid hit rate and no preemption", cs)
	}
	return res, cs
}

// bySend returns the records in the order they were sent.
func bySend(recs []openloop.Record) []openloop.Record {
	out := append([]openloop.Record(nil), recs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].SentNs < out[j].SentNs })
	return out
}

func TestWorkloadSharedPrefixHitRate(t *testing.T) {
	t.Parallel()
	base := serveSimInProcess(t, fastSim(8192)) // 131k tokens: nothing is evicted
	for _, tc := range []struct {
		name                   string
		input, prefix, groups  int
		wantPerHit, wantMisses int // sanity of the arithmetic below
	}{
		{"aligned", 1024, 768, 4, 768, 4},     // 48 whole blocks
		{"unaligned", 1024, 760, 4, 752, 4},   // 47 whole blocks: the 48th is part prefix, part suffix
		{"whole prompt", 512, 512, 2, 496, 2}, // every token shared, but never the last one: 31 blocks
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, cs := runWithCache(t, base, openloop.Config{
				Rate: 50, Seed: int64(tc.input + tc.prefix), Requests: 100,
				Shape: openloop.Shape{Name: tc.name, Input: tc.input, Output: 4,
					Prefix: &openloop.Prefix{NumPrefixes: tc.groups, PrefixTokens: tc.prefix}},
			})
			// A group's prefix is cached once a request of the group has
			// finished its prefill (blocks register when computed; the first
			// token comes from that step). A hit covers the prefix's whole
			// 16-token blocks, never the prompt's last token. So a request
			// sent after a group-mate's first token came back hits for sure
			// (the lower bound), and none but each group's first can hit
			// (the upper bound): where between them the engine lands depends
			// on how long the first token took to come back, the machine's.
			perHit := min(tc.prefix, tc.input-1) / simBlock * simBlock
			var queries, hits, most float64
			misses := 0
			firstTok := map[int]int64{}
			for _, r := range bySend(res.Records) {
				if r.PrefixGroup < 1 || r.PrefixGroup > tc.groups || r.InputTokens != tc.input {
					t.Fatalf("record %d: group %d input %d", r.ID, r.PrefixGroup, r.InputTokens)
				}
				queries += float64(r.InputTokens)
				if ft, ok := firstTok[r.PrefixGroup]; ok && ft < r.SentNs {
					hits += float64(perHit)
				} else {
					misses++
				}
				if ft, ok := firstTok[r.PrefixGroup]; !ok || r.FirstTokenNs < ft {
					firstTok[r.PrefixGroup] = r.FirstTokenNs
				}
			}
			most = float64((len(res.Records) - len(firstTok)) * perHit)
			t.Logf("measured hit rate %.4f (%v/%v tokens), at least %.4f (%d sure misses), at most %.4f", cs.HitRate, cs.Hits, cs.Queries, hits/queries, misses, most/queries)
			if perHit != tc.wantPerHit || misses < tc.wantMisses {
				t.Fatalf("prediction: %d tokens a hit, %d misses; want %d, ≥ %d", perHit, misses, tc.wantPerHit, tc.wantMisses)
			}
			if cs.Queries != queries {
				t.Errorf("engine counted %v queried tokens, the load generator sent %v", cs.Queries, queries)
			}
			if cs.Hits < hits || cs.Hits > most {
				t.Errorf("engine counted %v hit tokens, want from %v (sent after a group-mate's first token) to %v (all but each group's first)", cs.Hits, hits, most)
			}
		})
	}
}

// traceLine is the part of a Mooncake trace line the prediction needs.
type traceLine struct {
	Timestamp float64 `json:"timestamp"`
	Input     int     `json:"input_length"`
	Output    int     `json:"output_length"`
	HashIDs   []int64 `json:"hash_ids"`
	Session   string  `json:"session_id"`
}

func readTrace(t *testing.T, path string) []traceLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []traceLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var l traceLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Timestamp < out[j].Timestamp })
	return out
}

// lruCache models the sim's prefix cache: capacity blocks of 16 tokens; a
// block is known by its chain key (the hash ids up to its 512-token block,
// and its index within that block). Requests run one at a time: a request
// hits the longest cached prefix of its blocks (never its last token), takes
// the rest of its KV blocks by evicting the least recently used cached blocks
// it does not use, and when it finishes its blocks become most recently used
// in reverse order, so its first block is evicted last (vLLM's free queue).
type lruCache struct {
	capacity int
	order    *list.List // front = least recently used
	at       map[string]*list.Element
}

func newLRU(capacity int) *lruCache {
	return &lruCache{capacity: capacity, order: list.New(), at: map[string]*list.Element{}}
}

// blockKeys returns the chain keys of the full 16-token blocks of a prompt.
func blockKeys(l traceLine, idx int) []string {
	var keys []string
	var chain strings.Builder
	for b := 0; b*simBlock+simBlock <= l.Input; b++ {
		tok := b * simBlock
		blk := tok / traceBlock
		if blk < len(l.HashIDs) {
			if tok%traceBlock == 0 {
				chain.WriteString(strconv.FormatInt(l.HashIDs[blk], 10) + "/")
			}
			keys = append(keys, chain.String()+strconv.Itoa(tok%traceBlock/simBlock))
		} else { // tokens beyond the hash ids are unique to the request
			keys = append(keys, fmt.Sprintf("pad%d/%d", idx, b))
		}
	}
	return keys
}

// request replays one request and returns its hit tokens.
func (c *lruCache) request(l traceLine, idx int) int {
	keys := blockKeys(l, idx)
	hit := 0
	for hit < len(keys) && hit < (l.Input-1)/simBlock && c.at[keys[hit]] != nil {
		hit++
	}
	inUse := map[string]bool{}
	for _, k := range keys[:hit] {
		inUse[k] = true
	}
	total := (l.Input + l.Output - 1 + simBlock - 1) / simBlock // KV blocks held at the end: all tokens but the last sampled
	for e := c.order.Front(); e != nil && c.order.Len()-hit+total > c.capacity; {
		next := e.Next()
		if k := e.Value.(string); !inUse[k] {
			c.order.Remove(e)
			delete(c.at, k)
		}
		e = next
	}
	for i := len(keys) - 1; i >= 0; i-- {
		switch k := keys[i]; {
		case i < hit:
			c.order.MoveToBack(c.at[k])
		case c.at[k] == nil: // else a recomputed duplicate, which stays uncached
			c.at[k] = c.order.PushBack(k)
		}
	}
	return hit * simBlock
}

// predictTrace replays the requests of a trace run, in the order the
// engine admitted them, through an LRU of capacity blocks and returns the
// token hit rate. With one request running at a time (MaxSeqs 1) the engine
// admits in the order the first tokens came back.
func predictTrace(lines []traceLine, recs []openloop.Record, capacity int) float64 {
	c := newLRU(capacity)
	var q, h int
	byFirst := append([]openloop.Record(nil), recs...)
	sort.SliceStable(byFirst, func(i, j int) bool { return byFirst[i].FirstTokenNs < byFirst[j].FirstTokenNs })
	for _, r := range byFirst {
		q += lines[r.ID].Input
		h += c.request(lines[r.ID], r.ID)
	}
	return float64(h) / float64(q)
}

func TestWorkloadTraceLRUHitRate(t *testing.T) {
	t.Parallel()
	const kvBlocks = 1024 // 32 trace blocks of 512 tokens: the trace's working set does not fit
	lines := readTrace(t, syntheticTrace)
	sim := fastSim(kvBlocks)
	sim.StepBaseUs, sim.DecodeSeqUs = 150, 2
	// One request runs at a time, as the LRU replay assumes: where a busy
	// machine slows the engine and requests overlap, the later ones wait
	// instead of filling the cache until one is preempted.
	sim.MaxSeqs = 1
	base := serveSimInProcess(t, sim)
	res, cs := runWithCache(t, base, openloop.Config{
		Rate: 1, Seed: 5,
		Shape: openloop.Shape{Name: "synthetic", Trace: &openloop.Trace{Path: syntheticTrace, TimeScale: 15}},
	})
	if len(res.Records) != len(lines) {
		t.Fatalf("%d records, trace has %d lines", len(res.Records), len(lines))
	}
	for _, r := range res.Records {
		if l := lines[r.ID]; l.Input != r.InputTokens || l.Session != r.Session {
			t.Fatalf("record %d (input %d, session %q) is not trace line %+v", r.ID, r.InputTokens, r.Session, l)
		}
	}
	if peak := checkSessions(t, "trace", res.Records); peak < 4 {
		t.Errorf("only %d sessions open at once without max_inflight_sessions", peak)
	}
	// The LRU replay runs requests one at a time in the engine's order, as
	// the engine does here (MaxSeqs 1): however much the sends overlapped
	// (the machine's speed decides), the prediction is exact.
	overlap := 0
	recs := bySend(res.Records)
	for i := 1; i < len(recs); i++ {
		if recs[i].SentNs < recs[i-1].DoneNs {
			overlap++
		}
	}
	t.Logf("%d of %d requests sent while the previous one ran", overlap, len(recs))
	want := predictTrace(lines, res.Records, kvBlocks)
	unbounded := predictTrace(lines, res.Records, 1<<30)
	t.Logf("trace: measured hit rate %.4f, LRU(%d blocks) predicts %.4f, infinite cache %.4f", cs.HitRate, kvBlocks, want, unbounded)
	if unbounded-want < 0.05 {
		t.Errorf("the cache is too large to test eviction: LRU %.4f vs infinite %.4f", want, unbounded)
	}
	if d := cs.HitRate - want; math.Abs(d) > 1e-12 {
		t.Errorf("hit rate %.6f, LRU prediction %.6f: off by %.3f pp; want the replay exact", cs.HitRate, want, 100*d)
	}
}
