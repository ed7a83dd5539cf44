package openloop

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// synthLine is one line of a synthetic Mooncake-format trace, with the
// conversation that made it (ground truth the trace itself does not carry).
type synthLine struct {
	Timestamp    float64 `json:"timestamp"`
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
	SessionID    string  `json:"session_id,omitempty"`
	conv         int
}

// synthConversations makes a trace shaped like Mooncake's conversation trace:
// no session_id, every request starts with block 0 (the shared system
// prompt), and each turn of a conversation repeats the previous turn's
// blocks and adds new ones. Conversations start at random times and their
// turns interleave with other conversations'.
func synthConversations(seed uint64, convs int) []synthLine {
	r := rand.New(rand.NewPCG(seed, 7))
	next := int64(1)
	var out []synthLine
	for c := range convs {
		t := r.Float64() * 600_000
		chain := []int64{0}
		turns := 1 + r.IntN(8)
		if r.IntN(3) == 0 {
			turns = 1 // a third are one-shot requests
		}
		for range turns {
			for range 3 + r.IntN(12) {
				chain = append(chain, next)
				next++
			}
			out = append(out, synthLine{Timestamp: math.Round(t), InputLength: 512*len(chain) - r.IntN(400),
				OutputLength: 1 + r.IntN(500), HashIDs: slices.Clone(chain), conv: c})
			t += 1000 + r.Float64()*60_000
		}
	}
	slices.SortStableFunc(out, func(a, b synthLine) int { return int(a.Timestamp - b.Timestamp) })
	return out
}

func encodeSynth(t testing.TB, lines []synthLine) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, l := range lines {
		j, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// idealRate is the infinite-cache block hit rate, written out plainly.
func idealRate(lines [][]int64) float64 {
	seen := map[int64]bool{}
	hits, total := 0, 0
	for _, ids := range lines {
		k := 0
		for k < len(ids) && seen[ids[k]] {
			k++
		}
		hits += k
		total += len(ids)
		for _, h := range ids {
			seen[h] = true
		}
	}
	return float64(hits) / float64(total)
}

// TestSampleKeepsChainSessions: on traces without session_id, sampling by
// hash chain keeps every conversation whole and its prefix reuse (the
// sample's ideal hit rate stays near the full trace's), where sampling lines
// (session_id mode) destroys it — over many seeds, with every rate computed
// here independently of the sampler.
func TestSampleKeepsChainSessions(t *testing.T) {
	var keptSum, lostSum float64
	const seeds = 20
	for seed := range uint64(seeds) {
		lines := synthConversations(seed, 500)
		data := encodeSynth(t, lines)
		all := make([][]int64, len(lines))
		convSize := map[int]int{}
		for i, l := range lines {
			all[i] = l.HashIDs
			convSize[l.conv]++
		}
		full := idealRate(all)
		sample := func(mode SessionMode) ([]synthLine, SampleReport) {
			var out bytes.Buffer
			rep, err := SampleTraceWith(context.Background(), bytes.NewReader(data), &out,
				SampleOptions{Requests: 200, Seed: int64(seed), Sessions: mode})
			if err != nil {
				t.Fatal(err)
			}
			var got []synthLine
			for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var s synthLine
				if err := json.Unmarshal([]byte(l), &s); err != nil {
					t.Fatalf("seed %d: sampled line %q: %v", seed, l, err)
				}
				got = append(got, s)
			}
			return got, rep
		}
		chain, rep := sample(SessionsAuto)
		if math.Abs(rep.IdealHitRate-full) > 1e-12 {
			t.Fatalf("seed %d: report says full ideal %.6f, computed %.6f", seed, rep.IdealHitRate, full)
		}
		// Identify each sampled line's conversation by its hash ids (unique
		// in the trace) and check conversations are whole and tagged once.
		conv := map[string]int{}
		for _, l := range lines {
			conv[fmt.Sprint(l.HashIDs)] = l.conv
		}
		count, tag := map[int]int{}, map[int]string{}
		var ids [][]int64
		for _, s := range chain {
			c := conv[fmt.Sprint(s.HashIDs)]
			count[c]++
			ids = append(ids, s.HashIDs)
			if convSize[c] > 1 {
				if s.SessionID == "" || (tag[c] != "" && tag[c] != s.SessionID) {
					t.Fatalf("seed %d: conversation %d tagged %q and %q", seed, c, tag[c], s.SessionID)
				}
				tag[c] = s.SessionID
			} else if s.SessionID != "" {
				t.Fatalf("seed %d: a one-request session tagged %q", seed, s.SessionID)
			}
		}
		for c, n := range count {
			if n != convSize[c] {
				t.Fatalf("seed %d: conversation %d: %d of its %d turns sampled", seed, c, n, convSize[c])
			}
		}
		if len(slices.Compact(slices.Sorted(maps.Values(tag)))) != len(tag) {
			t.Fatalf("seed %d: two conversations share a session_id", seed)
		}
		if got := idealRate(ids); math.Abs(rep.SampledIdealHitRate-got) > 1e-12 {
			t.Fatalf("seed %d: report says sample ideal %.6f, computed %.6f", seed, rep.SampledIdealHitRate, got)
		}
		keptSum += rep.SampledIdealHitRate / full
		lines2, rep2 := sample(SessionsID)
		if rep2.SampledSessions != len(lines2) {
			t.Fatalf("seed %d: session_id mode: %d sessions for %d lines", seed, rep2.SampledSessions, len(lines2))
		}
		lostSum += rep2.SampledIdealHitRate / full
	}
	kept, lost := keptSum/seeds, lostSum/seeds
	t.Logf("sample/full ideal hit rate over %d seeds: by hash chain %.3f, by line %.3f", seeds, kept, lost)
	if kept < 0.85 || kept > 1.15 {
		t.Errorf("hash-chain samples keep %.3f of the full trace's ideal hit rate, want 0.85-1.15", kept)
	}
	if lost > 0.5 {
		t.Errorf("line samples keep %.3f of the ideal hit rate; the test trace does not show the loss", lost)
	}
}

// listLRU is an independent LRU prefix cache over hash ids: a request hits
// its cached leading ids, then its ids (as many leading ones as fit) become
// the most recently used, its first id most of all.
type listLRU struct {
	cap   int
	order *list.List // front = least recently used
	at    map[int64]*list.Element
}

func (c *listLRU) request(ids []int64) (hits int) {
	for hits < len(ids) && c.at[ids[hits]] != nil {
		hits++
	}
	keep := ids[:min(len(ids), c.cap)]
	for i := len(keep) - 1; i >= 0; i-- {
		if e := c.at[keep[i]]; e != nil {
			c.order.MoveToBack(e)
			continue
		}
		if c.order.Len() == c.cap {
			e := c.order.Front()
			delete(c.at, e.Value.(int64))
			c.order.Remove(e)
		}
		c.at[keep[i]] = c.order.PushBack(keep[i])
	}
	return hits
}

func TestTraceStatsLRU(t *testing.T) {
	for seed := range uint64(10) {
		lines := synthConversations(seed, 200)
		p := filepath.Join(t.TempDir(), "t.jsonl")
		if err := os.WriteFile(p, encodeSynth(t, lines), 0o644); err != nil {
			t.Fatal(err)
		}
		sizes := []int{1, 50, 500, 5000, 1 << 20}
		st, err := TraceStatsOf(context.Background(), p, StatsOptions{LRUBlocks: sizes})
		if err != nil {
			t.Fatal(err)
		}
		var all [][]int64
		convs := map[int]bool{}
		for _, l := range lines {
			all = append(all, l.HashIDs)
			convs[l.conv] = true
		}
		if st.Requests != len(lines) || st.Sessions != len(convs) || st.CommonBlocks != 1 {
			t.Fatalf("seed %d: %d requests, %d sessions, %d common; want %d, %d, 1", seed, st.Requests, st.Sessions, st.CommonBlocks, len(lines), len(convs))
		}
		if math.Abs(st.IdealHitRate-idealRate(all)) > 1e-12 {
			t.Fatalf("seed %d: ideal %.6f, want %.6f", seed, st.IdealHitRate, idealRate(all))
		}
		for i, n := range sizes {
			c := &listLRU{cap: n, order: list.New(), at: map[int64]*list.Element{}}
			hits, total := 0, 0
			for _, ids := range all {
				hits += c.request(ids)
				total += len(ids)
			}
			if want := float64(hits) / float64(total); math.Abs(st.LRU[i].HitRate-want) > 1e-12 {
				t.Fatalf("seed %d: LRU %d: %.6f, independent LRU %.6f", seed, n, st.LRU[i].HitRate, want)
			}
		}
		if last := st.LRU[len(sizes)-1].HitRate; math.Abs(last-st.IdealHitRate) > 1e-12 {
			t.Fatalf("seed %d: an LRU larger than the trace gives %.6f, the infinite cache %.6f", seed, last, st.IdealHitRate)
		}
		if !(st.LRU[0].HitRate < st.LRU[1].HitRate && st.LRU[1].HitRate < st.IdealHitRate) {
			t.Errorf("seed %d: hit rates do not grow with the cache: %+v ideal %.4f", seed, st.LRU, st.IdealHitRate)
		}
	}
}

func TestSessionModeAndOptionErrors(t *testing.T) {
	if _, err := ParseSessionMode("lines"); err == nil || !strings.Contains(err.Error(), "auto, session_id, hash_chain") {
		t.Errorf("bad mode: %v", err)
	}
	_, err := SampleTraceWith(context.Background(), strings.NewReader(""), &bytes.Buffer{}, SampleOptions{Requests: 1, CommonFrac: 2})
	if err == nil || !strings.Contains(err.Error(), "common fraction") {
		t.Errorf("bad common fraction: %v", err)
	}
	p := filepath.Join(t.TempDir(), "t.jsonl")
	os.WriteFile(p, []byte(`{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}`+"\n"), 0o644)
	if _, err := TraceStatsOf(context.Background(), p, StatsOptions{LRUBlocks: []int{0}}); err == nil {
		t.Error("an LRU of 0 blocks was accepted")
	}
	if _, err := TraceStatsOf(context.Background(), filepath.Join(t.TempDir(), "none"), StatsOptions{}); err == nil {
		t.Error("a missing file was accepted")
	}
}

func TestWithSessionID(t *testing.T) {
	for _, in := range []string{`{"timestamp": 1, "hash_ids": [0, 3]}`, `{"timestamp":1}  `, `{"a": "}"}`} {
		out := withSessionID([]byte(strings.TrimSpace(in)), `chain-"3"`)
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil || m["session_id"] != `chain-"3"` {
			t.Errorf("%s → %s: %v %v", in, out, m, err)
		}
	}
}

// TestLeadCounterBounded: the bounded two-pass count finds exactly the ids
// a full count finds at every fraction ≥ MinCommonFrac, on traces with far
// more distinct leading ids than it keeps.
func TestLeadCounterBounded(t *testing.T) {
	for seed := range uint64(5) {
		r := rand.New(rand.NewPCG(seed, 11))
		var reqs []TraceRequest
		next := int64(1000)
		for range 30000 {
			var ids []int64
			switch x := r.Float64(); {
			case x < 0.6:
				ids = append(ids, 0) // a system prompt in 60%
			case x < 0.63:
				ids = append(ids, 1, 2) // another in 3%
			case x < 0.635:
				ids = append(ids, 3) // a rare one, 0.5%
			}
			for range 1 + r.IntN(10) {
				ids = append(ids, next)
				next++
			}
			reqs = append(reqs, TraceRequest{HashIDs: ids})
		}
		full := map[int64]int{}
		for _, tr := range reqs {
			for i, h := range tr.HashIDs {
				if i < commonDepth {
					full[h]++
				}
			}
		}
		c := &leadCounter{cand: map[int64]int{}}
		for i := range reqs {
			c.add(&reqs[i])
		}
		if len(c.cand) > leadSlots {
			t.Fatalf("%d candidates kept, bound %d", len(c.cand), leadSlots)
		}
		c.startVerify()
		for i := range reqs {
			c.verify(&reqs[i])
		}
		for _, frac := range []float64{0.01, 0.02, 0.1, 0.5} {
			want := map[int64]bool{}
			for h, k := range full {
				if float64(k) >= frac*float64(len(reqs)) {
					want[h] = true
				}
			}
			if got := c.common(frac); !maps.Equal(got, want) {
				t.Errorf("seed %d frac %v: common %v, want %v", seed, frac, got, want)
			}
		}
	}
}

// TestIdealNewTokens: against an ideal cache a request's new tokens are its
// prompt less the leading blocks any earlier request (in trace order, not
// file order) sent, never its last token; the request limit cuts the replay
// as the replay does.
func TestIdealNewTokens(t *testing.T) {
	reqs := []TraceRequest{
		{TimestampMs: 30, InputLength: 1536, HashIDs: []int64{1, 2, 9}}, // id 2: 1, 2 seen → 512 new
		{TimestampMs: 10, InputLength: 1000, HashIDs: []int64{1, 2}},    // id 0: all new
		{TimestampMs: 20, InputLength: 600, HashIDs: []int64{1, 5}},     // id 1: 1 seen → 88 new
		{TimestampMs: 40, InputLength: 1024, HashIDs: []int64{1, 2}},    // id 3: all seen → 1 new (the last token)
		{TimestampMs: 50, InputLength: 700, HashIDs: []int64{7, 1}},     // id 4: 7 unseen: a miss stops the prefix
	}
	got, err := IdealNewTokens(reqs, Trace{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1000, 88, 512, 1, 700}; !slices.Equal(got, want) {
		t.Errorf("IdealNewTokens = %v, want %v", got, want)
	}
	got, _ = IdealNewTokens(reqs, Trace{RequestLimit: 2})
	if want := []int{1000, 88}; !slices.Equal(got, want) {
		t.Errorf("with request_limit 2: %v, want %v", got, want)
	}
}
