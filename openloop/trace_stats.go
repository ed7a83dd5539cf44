package openloop

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/mbench/mbench/stats"
)

// StatsOptions says what TraceStatsOf computes.
type StatsOptions struct {
	Sessions   SessionMode // how requests group into sessions ("" = auto)
	CommonFrac float64     // see SampleOptions (0 = DefaultCommonFrac)
	// LRUBlocks lists cache sizes, in hash-id blocks of TraceBlockTokens
	// tokens, at which to replay the trace through an LRU prefix cache.
	LRUBlocks []int
}

// TraceStats describes a trace: its size, sessions, lengths and the prefix
// hit rate an ideal cache would reach on it.
type TraceStats struct {
	Requests       int          `json:"requests"`
	Sessions       int          `json:"sessions"`
	SessionMode    SessionMode  `json:"session_mode"`
	CommonBlocks   int          `json:"common_blocks"` // ids counted as common, not session marks
	DurationMs     float64      `json:"duration_ms"`   // last timestamp − first
	SessionSize    CountSummary `json:"session_size"`  // requests per session
	InputLength    CountSummary `json:"input_length"`
	OutputLength   CountSummary `json:"output_length"`
	Blocks         int64        `json:"blocks"`          // hash ids over all requests
	DistinctBlocks int64        `json:"distinct_blocks"` // = the infinite cache's size in blocks
	IdealHitRate   float64      `json:"ideal_hit_rate"`  // infinite cache, block hit rate
	LRU            []LRUHitRate `json:"lru,omitempty"`
}

// CountSummary summarizes a distribution of counts.
type CountSummary struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// LRUHitRate is the block hit rate of an LRU prefix cache of Blocks blocks.
type LRUHitRate struct {
	Blocks  int     `json:"blocks"`
	HitRate float64 `json:"hit_rate"`
}

// TraceStatsOf reads the trace at path and describes it. Requests are taken
// in timestamp order (stable, as a replay sends them), one at a time: a
// request hits the leading blocks its cache holds, up to the first miss.
func TraceStatsOf(ctx context.Context, path string, o StatsOptions) (*TraceStats, error) {
	mode, frac, err := groupingOptions(o.Sessions, o.CommonFrac)
	if err != nil {
		return nil, fmt.Errorf("trace stats: %w", err)
	}
	for _, b := range o.LRUBlocks {
		if b < 1 {
			return nil, fmt.Errorf("trace stats: lru: cache sizes must be ≥ 1 block, got %d", b)
		}
	}
	reqs, err := LoadTrace(path)
	if err != nil {
		return nil, fmt.Errorf("trace stats: %w", err)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	slices.SortStableFunc(reqs, func(a, b TraceRequest) int { return cmp.Compare(a.TimestampMs, b.TimestampMs) })
	st := &TraceStats{Requests: len(reqs), SessionMode: mode}
	if len(reqs) == 0 {
		return st, nil
	}
	ss, _ := findSessions(func(fn func(*TraceRequest, []byte) error) error {
		for i := range reqs {
			_ = fn(&reqs[i], nil) // never fails: findSessions' functions do not
		}
		return nil
	}, mode, frac)
	st.CommonBlocks = len(ss.g.common)
	in, out := make([]float64, len(reqs)), make([]float64, len(reqs))
	caches := make([]*lruBlocks, len(o.LRUBlocks))
	for i, n := range o.LRUBlocks {
		caches[i] = newLRUBlocks(n)
	}
	for i := range reqs {
		tr := &reqs[i]
		in[i], out[i] = float64(tr.InputLength), float64(tr.OutputLength)
		for _, c := range caches {
			c.request(tr.HashIDs)
		}
	}
	st.Sessions = len(ss.sizes)
	sizes := make([]float64, 0, len(ss.sizes))
	for _, n := range ss.sizes {
		sizes = append(sizes, float64(n))
	}
	st.SessionSize, st.InputLength, st.OutputLength = distOf(sizes), distOf(in), distOf(out)
	st.DurationMs = reqs[len(reqs)-1].TimestampMs - reqs[0].TimestampMs
	st.Blocks, st.DistinctBlocks, st.IdealHitRate = ss.full.blocks, ss.full.blocks-ss.full.hits, ss.full.rate()
	for i, c := range caches {
		st.LRU = append(st.LRU, LRUHitRate{Blocks: o.LRUBlocks[i], HitRate: c.rate()})
	}
	return st, nil
}

// distOf summarizes xs (sorted in place).
func distOf(xs []float64) CountSummary {
	if len(xs) == 0 {
		return CountSummary{}
	}
	slices.Sort(xs)
	return CountSummary{Mean: stats.Mean(xs), P50: stats.PercentileSorted(xs, 50), P90: stats.PercentileSorted(xs, 90),
		P99: stats.PercentileSorted(xs, 99), Max: xs[len(xs)-1]}
}

// lruBlocks is an LRU prefix cache of hash-id blocks. After a request its
// blocks are the most recently used, its first block most of all (vLLM
// frees a sequence's blocks tail first, so its tail is evicted first). A
// request longer than the cache keeps only its leading blocks that fit.
type lruBlocks struct {
	capacity   int
	slot       map[int64]int32 // id → slot
	id         []int64
	prev, next []int32 // slot links; slot capacity is the sentinel: next = LRU end
	used       int
	hitCount
}

func newLRUBlocks(capacity int) *lruBlocks {
	c := &lruBlocks{capacity: capacity, slot: map[int64]int32{}, id: make([]int64, capacity),
		prev: make([]int32, capacity+1), next: make([]int32, capacity+1)}
	s := int32(capacity)
	c.prev[s], c.next[s] = s, s
	return c
}

func (c *lruBlocks) unlink(b int32) {
	p, n := c.prev[b], c.next[b]
	c.next[p], c.prev[n] = n, p
}

// pushMRU puts slot b at the most recently used end.
func (c *lruBlocks) pushMRU(b int32) {
	s := int32(c.capacity)
	last := c.prev[s]
	c.next[last], c.prev[b], c.next[b], c.prev[s] = b, last, s, b
}

// request looks ids up as a prefix, then makes them all most recently used,
// first block last.
func (c *lruBlocks) request(ids []int64) {
	c.blocks += int64(len(ids))
	for _, h := range ids {
		if _, ok := c.slot[h]; !ok {
			break
		}
		c.hits++
	}
	ids = ids[:min(len(ids), c.capacity)]
	for i := len(ids) - 1; i >= 0; i-- {
		h := ids[i]
		if b, ok := c.slot[h]; ok {
			c.unlink(b)
			c.pushMRU(b)
			continue
		}
		var b int32
		if c.used < c.capacity {
			b = int32(c.used)
			c.used++
		} else { // evict the least recently used
			b = c.next[c.capacity]
			c.unlink(b)
			delete(c.slot, c.id[b])
		}
		c.id[b], c.slot[h] = h, b
		c.pushMRU(b)
	}
}

// WriteText writes st as the table `mbench trace stats` prints.
func (st *TraceStats) WriteText(w io.Writer) error {
	pct := func(x float64) string { return fmt.Sprintf("%.2f%%", 100*x) }
	d := func(x CountSummary) string {
		return fmt.Sprintf("mean %.1f  p50 %.0f  p90 %.0f  p99 %.0f  max %.0f", x.Mean, x.P50, x.P90, x.P99, x.Max)
	}
	_, err := fmt.Fprintf(w, "requests          %d over %.1f s\nsessions          %d (%s; %d common blocks)\nsession size      %s\ninput length      %s\noutput length     %s\nblocks            %d (%d distinct, %d tokens each)\nideal hit rate    %s (infinite cache)\n",
		st.Requests, st.DurationMs/1000, st.Sessions, st.SessionMode, st.CommonBlocks, d(st.SessionSize),
		d(st.InputLength), d(st.OutputLength), st.Blocks, st.DistinctBlocks, TraceBlockTokens, pct(st.IdealHitRate))
	for _, l := range st.LRU {
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "LRU %-8d      %s\n", l.Blocks, pct(l.HitRate))
	}
	return err
}
