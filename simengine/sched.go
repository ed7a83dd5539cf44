package simengine

import (
	"math/rand/v2"
	"slices"
)

// eosProb is the per-token chance of a pseudo-EOS when ignore_eos is false
// and min_tokens have been generated.
const eosProb = 1.0 / 100

// seq is one request inside the engine. All fields are guarded by the
// engine's mutex.
type seq struct {
	serial      uint64
	promptLen   int
	numTokens   int // prompt + generated
	numComputed int // tokens whose KV is computed
	maxTokens   int
	minTokens   int
	output      int // generated tokens
	ignoreEOS   bool
	hashes      []uint64 // chain hashes of the prompt's full blocks
	blocks      []int32
	numHashed   int // leading blocks registered in (or hit from) the prefix cache
	queried     bool
	aborted     bool
	done        bool
	rng         *rand.Rand
	stream      *tokenStream
	remoteKV    bool    // the prompt's full blocks arrive from a prefill instance
	keepBlocks  bool    // a prefill for a remote decode: remember the blocks
	sentBlocks  []int32 // the blocks a remote decode would pull
	xferKey     string  // a MooncakeConnector prefill for a remote decode: its transfer key
	// cachedTokens are the prompt tokens it did not compute: prefix-cache
	// hits and KV received, at its first admission (vLLM's num_cached_tokens).
	cachedTokens int
}

// counters are the engine's Prometheus counters.
type counters struct {
	queries, hits, preemptions int64
	extQueries, extHits        int64 // the KV connector's (external) prefix cache
	promptTokens, genTokens    int64
	successLength, successStop int64
	aborted, steps             int64
}

// stepPlan is what one step computes: new tokens per scheduled sequence.
type stepPlan struct {
	seqs          []*seq
	tokens        []int
	prefillTokens int
	decodeSeqs    int
	numRunning    int
	numWaiting    int
	cachedBlocks  int
	newest        uint64 // the highest serial among seqs
}

func (p *stepPlan) add(s *seq, n int) {
	p.seqs = append(p.seqs, s)
	p.tokens = append(p.tokens, n)
	p.newest = max(p.newest, s.serial)
	if n == 1 && s.output > 0 && s.numTokens-s.numComputed == 1 {
		p.decodeSeqs++
	} else {
		p.prefillTokens += n
	}
}

// scheduler is a vLLM-v1-like continuous-batching scheduler over a kvCache.
type scheduler struct {
	budget, maxSeqs int
	kv              *kvCache
	waiting         []*seq
	running         []*seq
	abortsPending   int
	c               counters
	// kvDone, when set, is told that a sequence with an xferKey finished
	// (capped: by length) or was aborted; true means the connector now
	// holds its blocks, so they are not freed here.
	kvDone func(s *seq, capped bool) bool
}

func newScheduler(cfg Config) *scheduler {
	return &scheduler{budget: cfg.TokenBudget, maxSeqs: cfg.MaxSeqs, kv: newKVCache(cfg.KVBlocks, cfg.BlockSize)}
}

func (sc *scheduler) add(s *seq) { sc.waiting = append(sc.waiting, s) }

func (sc *scheduler) idle() bool { return len(sc.waiting) == 0 && len(sc.running) == 0 }

// abort marks s; the next schedule frees it.
func (sc *scheduler) abort(s *seq) {
	if s.done || s.aborted {
		return
	}
	s.aborted = true
	sc.abortsPending++
}

func (sc *scheduler) purgeAborted() {
	if sc.abortsPending == 0 {
		return
	}
	drop := func(s *seq) bool {
		if s.aborted {
			if s.xferKey != "" && sc.kvDone != nil {
				sc.kvDone(s, false)
			}
			sc.free(s)
			s.done = true
			sc.c.aborted++
		}
		return s.aborted
	}
	sc.running = slices.DeleteFunc(sc.running, drop)
	sc.waiting = slices.DeleteFunc(sc.waiting, drop)
	sc.abortsPending = 0
}

// free releases s's blocks, its last blocks first.
func (sc *scheduler) free(s *seq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		sc.kv.release(s.blocks[i])
	}
	s.blocks = s.blocks[:0]
	s.numHashed = 0
}

// grow gives s the blocks to hold tokens tokens, or reports false and
// changes nothing.
func (sc *scheduler) grow(s *seq, tokens int) bool {
	need := sc.kv.blocksFor(tokens) - len(s.blocks)
	if need > sc.kv.numFree {
		return false
	}
	for ; need > 0; need-- {
		s.blocks = append(s.blocks, sc.kv.alloc())
	}
	return true
}

// preempt frees s for recompute and puts it at the head of the queue.
func (sc *scheduler) preempt(s *seq) {
	sc.free(s)
	s.numComputed = 0
	sc.c.preemptions++
	sc.waiting = append([]*seq{s}, sc.waiting...)
}

// schedule plans the next step: running sequences first (remaining prefill
// chunk or one decode token each), preempting the newest running sequence
// when one cannot get a block; then, if nothing was preempted, waiting
// sequences in FIFO order with chunked prefill, while budget, MaxSeqs and
// free blocks allow.
func (sc *scheduler) schedule(p *stepPlan) {
	*p = stepPlan{seqs: p.seqs[:0], tokens: p.tokens[:0]} // the slices' arrays are reused
	sc.purgeAborted()
	budget := sc.budget
	preempted := false
	for i := 0; i < len(sc.running) && budget > 0; i++ {
		s := sc.running[i]
		n := min(s.numTokens-s.numComputed, budget)
		self := false
		for !sc.grow(s, s.numComputed+n) {
			victim := sc.running[len(sc.running)-1]
			sc.running = sc.running[:len(sc.running)-1]
			sc.preempt(victim)
			preempted = true
			if victim == s {
				self = true
				break
			}
		}
		if self {
			break
		}
		p.add(s, n)
		budget -= n
	}
	for !preempted && budget > 0 && len(sc.waiting) > 0 && len(sc.running) < sc.maxSeqs {
		s := sc.waiting[0]
		n, ok := sc.admit(s, budget)
		if !ok {
			break
		}
		sc.waiting[0] = nil
		sc.waiting = sc.waiting[1:]
		sc.running = append(sc.running, s)
		p.add(s, n)
		budget -= n
	}
	p.numRunning, p.numWaiting = len(sc.running), len(sc.waiting)
	p.cachedBlocks = sc.kv.numCached()
}

// admit looks s up in the prefix cache (whole blocks, never the prompt's last
// token, as vLLM) and allocates the blocks for its first chunk. It changes
// nothing when the blocks are not there.
func (sc *scheduler) admit(s *seq, budget int) (int, bool) {
	bs := sc.kv.blockSize
	var hits []int32
	if s.numComputed == 0 && len(s.blocks) == 0 {
		hits = sc.kv.lookup(s.hashes, (s.numTokens-1)/bs)
	}
	computed := len(hits) * bs
	if s.remoteKV && s.numComputed == 0 && len(s.blocks) == 0 {
		computed = (s.numTokens - 1) / bs * bs // the rest of the full blocks came from the prefill instance
	}
	n := min(s.numTokens-computed, budget)
	needNew := sc.kv.blocksFor(computed+n) - len(hits)
	freeHits := 0
	for _, b := range hits {
		if sc.kv.ref[b] == 0 {
			freeHits++
		}
	}
	if needNew > sc.kv.numFree-freeHits {
		return 0, false
	}
	for _, b := range hits {
		sc.kv.touch(b)
		s.blocks = append(s.blocks, b)
	}
	s.numHashed = len(hits)
	s.numComputed = computed
	for ; needNew > 0; needNew-- {
		s.blocks = append(s.blocks, sc.kv.alloc())
	}
	if !s.queried {
		s.queried = true
		s.cachedTokens = computed
		sc.c.queries += int64(s.promptLen)
		sc.c.hits += int64(len(hits) * bs)
		sc.c.extQueries += int64(s.promptLen)
		sc.c.extHits += int64(computed - len(hits)*bs)
	}
	return n, true
}

// complete applies a finished step: KV becomes computed, full prompt blocks
// join the prefix cache, and every sequence whose tokens are all computed
// samples one token. Finished sequences leave the batch and free their blocks.
func (sc *scheduler) complete(p *stepPlan) {
	sc.c.steps++
	finished := 0
	bs := sc.kv.blockSize
	for i, s := range p.seqs {
		if s.aborted || s.done {
			continue
		}
		s.numComputed += p.tokens[i]
		full := min(min(s.numComputed, s.promptLen)/bs, len(s.hashes))
		for ; s.numHashed < full; s.numHashed++ {
			sc.kv.register(s.blocks[s.numHashed], s.hashes[s.numHashed])
		}
		if s.numComputed < s.numTokens {
			continue
		}
		if s.output == 0 {
			sc.c.promptTokens += int64(s.promptLen)
		}
		ev := sc.sample(s)
		s.output++
		s.numTokens++
		sc.c.genTokens++
		if ev.finish != "" {
			s.done = true
			finished++
			if s.keepBlocks {
				s.sentBlocks = append([]int32(nil), s.blocks...)
			}
			if s.xferKey == "" || sc.kvDone == nil || !sc.kvDone(s, ev.finish == "length") {
				sc.free(s)
			}
			if ev.finish == "stop" {
				sc.c.successStop++
			} else {
				sc.c.successLength++
			}
		}
		s.stream.push(ev)
	}
	if finished > 0 {
		sc.running = slices.DeleteFunc(sc.running, func(s *seq) bool { return s.done })
	}
}

// sample draws s's next token: a vocabulary word, or a pseudo-EOS once
// min_tokens are out when ignore_eos is off.
func (sc *scheduler) sample(s *seq) tokenEvent {
	last := s.output+1 == s.maxTokens
	if !s.ignoreEOS && s.output >= s.minTokens && s.rng.Float64() < eosProb {
		return tokenEvent{word: -1, finish: "stop"}
	}
	ev := tokenEvent{word: s.rng.IntN(len(vocab))}
	if last {
		ev.finish = "length"
	}
	return ev
}
