package simengine

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

func newTestSeq(sc *scheduler, serial uint64, prompt []int64, maxTokens int) *seq {
	s := &seq{
		serial: serial, promptLen: len(prompt), numTokens: len(prompt), maxTokens: maxTokens, minTokens: maxTokens,
		ignoreEOS: true, hashes: chainHashes(prompt, sc.kv.blockSize), rng: rand.New(rand.NewPCG(1, serial)),
		stream: newTokenStream(),
	}
	sc.add(s)
	return s
}

func ids(n, offset int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(offset + i)
	}
	return out
}

// stepTrace runs the scheduler without time until it is idle (or max steps)
// and records every plan.
type planSummary struct{ prefill, decode, running, waiting int }

func runSteps(t *testing.T, sc *scheduler, max int) []planSummary {
	t.Helper()
	var p stepPlan
	var out []planSummary
	for i := 0; i < max && !sc.idle(); i++ {
		sc.schedule(&p)
		if len(p.seqs) == 0 {
			t.Fatalf("step %d: empty plan with work queued", i)
		}
		out = append(out, planSummary{p.prefillTokens, p.decodeSeqs, p.numRunning, p.numWaiting})
		sc.complete(&p)
	}
	return out
}

func testScheduler(budget, maxSeqs, blocks, blockSize int) *scheduler {
	return newScheduler(Config{TokenBudget: budget, MaxSeqs: maxSeqs, KVBlocks: blocks, BlockSize: blockSize})
}

func TestContinuousBatchingTwoRequests(t *testing.T) {
	sc := testScheduler(2048, 256, 64, 16)
	a := newTestSeq(sc, 1, ids(10, 0), 3)
	b := newTestSeq(sc, 2, ids(20, 100), 5)
	got := runSteps(t, sc, 100)
	want := []planSummary{
		{30, 0, 2, 0}, // both prefills in one step
		{0, 2, 2, 0},  // both decode
		{0, 2, 2, 0},  // a's third token ends it
		{0, 1, 1, 0},
		{0, 1, 1, 0},
	}
	if !equalPlans(got, want) {
		t.Fatalf("plans %v, want %v", got, want)
	}
	if a.output != 3 || b.output != 5 || sc.kv.numFree != 64 {
		t.Errorf("outputs %d,%d (want 3,5); free blocks %d of 64", a.output, b.output, sc.kv.numFree)
	}
}

func equalPlans(a, b []planSummary) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestChunkedPrefill(t *testing.T) {
	sc := testScheduler(64, 256, 64, 16)
	a := newTestSeq(sc, 1, ids(200, 0), 2)
	got := runSteps(t, sc, 100)
	want := []planSummary{{64, 0, 1, 0}, {64, 0, 1, 0}, {64, 0, 1, 0}, {8, 0, 1, 0}, {0, 1, 1, 0}}
	if !equalPlans(got, want) || a.output != 2 {
		t.Fatalf("plans %v, want %v (output %d)", got, want, a.output)
	}

	// A running decode is scheduled first and takes one token of the budget.
	sc = testScheduler(64, 256, 64, 16)
	newTestSeq(sc, 1, ids(4, 0), 10)
	var p stepPlan
	sc.schedule(&p)
	sc.complete(&p)
	newTestSeq(sc, 2, ids(100, 500), 1)
	got = runSteps(t, sc, 3)
	want = []planSummary{{63, 1, 2, 0}, {37, 1, 2, 0}, {0, 1, 1, 0}}
	if !equalPlans(got, want) {
		t.Fatalf("decode-first plans %v, want %v", got, want)
	}
}

func TestMaxSeqsQueues(t *testing.T) {
	sc := testScheduler(2048, 2, 64, 16)
	for i := 0; i < 3; i++ {
		newTestSeq(sc, uint64(i+1), ids(8, 100*i), 2)
	}
	got := runSteps(t, sc, 100)
	want := []planSummary{{16, 0, 2, 1}, {0, 2, 2, 1}, {8, 0, 1, 0}, {0, 1, 1, 0}}
	if !equalPlans(got, want) {
		t.Fatalf("plans %v, want %v", got, want)
	}
}

func TestPreemptionWhenKVIsTiny(t *testing.T) {
	// 8 blocks of 4 tokens; each request needs ceil((8+20-1)/4) = 7 blocks.
	sc := testScheduler(2048, 256, 8, 4)
	a := newTestSeq(sc, 1, ids(8, 0), 20)
	b := newTestSeq(sc, 2, ids(8, 100), 20)
	runSteps(t, sc, 1000)
	if sc.c.preemptions == 0 {
		t.Fatal("no preemption with two requests that cannot both fit")
	}
	if a.output != 20 || b.output != 20 {
		t.Errorf("outputs %d, %d; want 20 each after recompute", a.output, b.output)
	}
	if sc.kv.numFree != 8 || sc.kv.usage() != 0 {
		t.Errorf("blocks leaked: %d free of 8", sc.kv.numFree)
	}
	if sc.c.queries != 16 {
		t.Errorf("prefix-cache queries %d: a preempted request must not be counted twice, want 16", sc.c.queries)
	}
}

func TestPreemptionOverHTTP(t *testing.T) {
	te := startEngine(t, Config{StepBaseUs: 200, Jitter: -1, KVBlocks: 8, BlockSize: 4})
	var wg sync.WaitGroup
	outs := make([]string, 3)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, outs[i], _ = te.postErr(`{"prompt":` + idsPrompt(8, 100*i) + `,"max_tokens":20,"ignore_eos":true,"stream":true}`)
		}()
	}
	wg.Wait()
	for i, out := range outs {
		if n := strings.Count(out, `"text":`); n != 20 || !strings.HasSuffix(out, "data: [DONE]\n\n") {
			t.Errorf("request %d: %d token chunks, want 20: %q", i, n, tail(out))
		}
	}
	m := te.metrics(t)
	if m["vllm:num_preemptions_total"] < 1 || m["vllm:kv_cache_usage_perc"] != 0 || m["vllm:generation_tokens_total"] != 60 {
		t.Errorf("metrics after preemption: %v", m)
	}
}

func TestKVCacheLRU(t *testing.T) {
	kv := newKVCache(4, 2)
	// Two sequences' worth of blocks, registered then freed.
	b0, b1 := kv.alloc(), kv.alloc()
	kv.register(b0, 10)
	kv.register(b1, 11)
	kv.release(b1)
	kv.release(b0)
	if kv.numCached() != 2 || kv.numFree != 4 || kv.usage() != 0 {
		t.Fatalf("cached %d free %d", kv.numCached(), kv.numFree)
	}
	// Free-but-cached blocks are hits.
	if hits := kv.lookup([]uint64{10, 11, 12}, 10); len(hits) != 2 || hits[0] != b0 {
		t.Fatalf("lookup %v", hits)
	}
	// Allocation takes the never-used blocks first, then the LRU cached one.
	x, y := kv.alloc(), kv.alloc()
	if x == b0 || x == b1 || y == b0 || y == b1 || kv.numCached() != 2 {
		t.Fatalf("evicted a cached block while uncached ones were free")
	}
	z := kv.alloc()
	if z != b1 || kv.numCached() != 1 {
		t.Fatalf("evicted %d, want the tail block %d first (freed last-first)", z, b1)
	}
	// A hit on a free cached block takes it off the free list.
	kv.touch(b0)
	if kv.numFree != 0 || kv.usage() != 1 {
		t.Fatalf("free %d after touching the last free block", kv.numFree)
	}
	// A duplicate hash stays unregistered.
	kv.release(x)
	w := kv.alloc()
	kv.register(w, 10)
	if kv.cached[10] != b0 {
		t.Fatalf("duplicate hash replaced the cached block")
	}
}

func TestChainHashesArePrefixes(t *testing.T) {
	a := chainHashes(ids(48, 0), 16)
	b := chainHashes(append(ids(32, 0), ids(16, 99)...), 16)
	c := chainHashes(append([]int64{7}, ids(47, 1)...), 16)
	if len(a) != 3 || a[0] != b[0] || a[1] != b[1] || a[2] == b[2] {
		t.Errorf("shared 32-token prefix: %x vs %x", a, b)
	}
	for i := range a {
		if a[i] == c[i] {
			t.Errorf("block %d hash equal although the first token differs", i)
		}
	}
	if len(chainHashes(ids(15, 0), 16)) != 0 {
		t.Errorf("a partial block was hashed")
	}
}
