package router

import (
	"hash/maphash"
	"slices"
	"sync"
)

// instance is the router's shadow state of one engine instance.
type instance struct {
	url      string
	inflight int // requests on it: prefilling here, or being served from here
	pending  int // prefill tokens sent here and not yet done
	index    *prefixIndex
	// engineLoad is the engine's own waiting + running count (LoadEngine);
	// -1 until it has answered.
	engineLoad int
}

// Decision is where one request goes. Prefill == Decode unless the prefill
// was offloaded (elastic) or the topology is PD-separated.
type Decision struct {
	Decode, Prefill int
	Reason          string // round_robin | new | sticky | override, +pd; +offload, +offload_capped, +offload_no_target
	Pinned          int    // the session's instance before this request; -1 none
	Class           Class
	PromptTokens    int
	CachedTokens    int // estimated cached on the instance the policy chose (the class's basis)
	NewTokens       int // PromptTokens − CachedTokens
	// PrefillNewTokens are the tokens the prefill instance computes: NewTokens,
	// or, for an offloaded prefill, the prompt less what the other instance holds.
	PrefillNewTokens int
	Loads            []int     // shadow: requests in flight per instance
	EngineLoads      []int     // LoadEngine: the engines' waiting + running (-1: not known yet)
	Scores           []float64 // the policy's scores, when it scored
	offload          bool      // an elastic offload (counted against MaxOffload)
	pd               bool      // a PD-separated topology's split
	prefillDone      bool
}

// Split names how d's request was split between instances: "offload" (an
// elastic offload of its prefill), "pd" (prefill on a producer, decode on a
// consumer) or "" (one instance did both).
func (d *Decision) Split() string {
	switch {
	case d.offload:
		return "offload"
	case d.pd:
		return "pd"
	}
	return ""
}

// Router decides where requests go and keeps the shadow state.
type Router struct {
	opt  Options
	seed maphash.Seed

	mu      sync.Mutex
	inst    []*instance
	serve   []int // instances that serve responses (all, or the consumers)
	prefill []int // producers of a PD-separated topology; nil = combined
	pins    map[string]int
	// Rotation pointers, each advanced once per use: rr for placing a
	// request (round robin, and where ties start), drr for a PD decode
	// instance, prr for an offload target. One pointer for two choices of a
	// request would advance twice and, with an even count, visit every other
	// instance only.
	rr, drr, prr int
	offloads     int // offloaded prefills in flight
}

// New returns a router over targets (base URLs). With producers, the
// topology is PD-separated: every prefill runs on a producer (chosen by the
// policy, sticky per session), every decode on a target (a consumer; the
// least loaded). Without, every target does both.
func New(targets, producers []string, o Options) (*Router, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Router{opt: o, seed: maphash.MakeSeed(), pins: map[string]int{}}
	for _, u := range targets {
		r.serve = append(r.serve, len(r.inst))
		r.inst = append(r.inst, &instance{url: u, index: newPrefixIndex(o.CacheBlocks), engineLoad: -1})
	}
	for _, u := range producers {
		r.prefill = append(r.prefill, len(r.inst))
		r.inst = append(r.inst, &instance{url: u, index: newPrefixIndex(o.CacheBlocks), engineLoad: -1})
	}
	return r, nil
}

// URL returns instance i's base URL.
func (r *Router) URL(i int) string { return r.inst[i].url }

// cached estimates the prompt tokens instance i holds: whole matched blocks,
// never the prompt's last token (an engine always computes that one).
func (r *Router) cached(i int, hashes []uint64, promptTokens int) int {
	return max(0, min(r.inst[i].index.match(hashes)*r.opt.BlockTokens, promptTokens-1))
}

// overloaded reports whether instance i carries more than OverrideFactor
// times the mean load of cands (and at least 2 requests, so one request on
// an idle cluster does not count).
func (r *Router) overloaded(i int, cands []int) bool {
	l, sum := r.load(i), 0
	for _, c := range cands {
		sum += r.load(c)
	}
	return l >= 2 && float64(l) > r.opt.OverrideFactor*(float64(sum)/float64(len(cands))) // over the mean load
}

// score is the policy's score of instance i for a prompt (lower is better).
func (r *Router) score(i int, hashes []uint64, promptTokens int) float64 {
	in := r.inst[i]
	switch r.opt.Policy {
	case Linear:
		hit := 0.0
		if promptTokens > 0 {
			hit = float64(r.cached(i, hashes, promptTokens)) / float64(promptTokens)
		}
		return float64(r.load(i)) - r.opt.Alpha*hit
	case LMetric:
		newTok := promptTokens - r.cached(i, hashes, promptTokens)
		return float64(in.pending+newTok) * float64(r.load(i)+1)
	}
	return float64(r.load(i)) // least loaded
}

// argmin returns the candidate with the lowest score (ties to the first
// after the rotating start *rot, which it advances, so equal instances share
// the work) and the scores by candidate.
func (r *Router) argmin(cands []int, rot *int, score func(i int) float64) (int, []float64) {
	scores := make([]float64, len(cands))
	for k, i := range cands {
		scores[k] = score(i)
	}
	start := *rot % len(cands)
	*rot++
	bk := start
	for j := range cands {
		k := (start + j) % len(cands)
		if scores[k] < scores[bk] {
			bk = k
		}
	}
	return cands[bk], scores
}

// place picks the instance for a session's request among cands: round
// robin, or its pinned instance unless overloaded, else the best-scoring.
func (r *Router) place(d *Decision, session string, cands []int, hashes []uint64, promptTokens int) int {
	if r.opt.Policy == RoundRobin {
		i := cands[r.rr%len(cands)]
		r.rr++
		d.Reason = "round_robin"
		return i
	}
	p, pinned := r.pins[session]
	if pinned {
		d.Pinned = p
		if !r.overloaded(p, cands) {
			d.Reason = "sticky"
			return p
		}
		others := slices.DeleteFunc(slices.Clone(cands), func(i int) bool { return i == p })
		if len(others) > 0 {
			cands = others
		}
		d.Reason = "override"
	} else {
		d.Reason = "new"
	}
	i, scores := r.argmin(cands, &r.rr, func(i int) float64 { return r.score(i, hashes, promptTokens) })
	d.Scores = scores
	if session != "" {
		r.pins[session] = i
	}
	return i
}

// Decide routes one request of session ("" = none) whose prompt has the
// given token ids, and takes its load on the chosen instances. Every
// Decide must be followed by Finish.
func (r *Router) Decide(session string, prompt []int64) *Decision {
	hashes := blockHashes(r.seed, prompt, r.opt.BlockTokens)
	n := len(prompt)
	r.mu.Lock()
	defer r.mu.Unlock()
	d := &Decision{Pinned: -1, PromptTokens: n, Loads: make([]int, len(r.inst))}
	for i, in := range r.inst {
		d.Loads[i] = in.inflight
	}
	if r.opt.Load == LoadEngine {
		d.EngineLoads = make([]int, len(r.inst))
		for i, in := range r.inst {
			d.EngineLoads[i] = in.engineLoad
		}
	}
	if r.prefill != nil { // PD-separated: prefill placed by the policy, decode on the least loaded consumer
		d.Prefill = r.place(d, session, r.prefill, hashes, n)
		d.Decode, _ = r.argmin(r.serve, &r.drr, func(i int) float64 { return float64(r.load(i)) })
		d.Reason += "+pd"
		d.pd = true
	} else {
		d.Decode = r.place(d, session, r.serve, hashes, n)
		d.Prefill = d.Decode
	}
	d.CachedTokens = r.cached(d.Prefill, hashes, n)
	d.NewTokens = n - d.CachedTokens
	d.Class = classOf(d.NewTokens, r.opt.Classes)
	if r.prefill == nil && r.opt.Offload && d.NewTokens >= r.opt.HeavyTokens { // the class bounds' rule: a bound belongs to the class above it
		// The cap is checked first: a capped offload picks no target, so it
		// leaves the target rotation where it was.
		if r.offloads >= r.opt.MaxOffload {
			d.Reason += "+offload_capped"
		} else if p, ok := r.offloadTarget(d.Decode); ok {
			d.Prefill, d.offload = p, true
			r.offloads++
			d.Reason += "+offload"
		} else {
			d.Reason += "+offload_no_target" // every other instance overloaded
		}
	}
	r.inst[d.Decode].inflight++
	if d.Prefill != d.Decode {
		r.inst[d.Prefill].inflight++
	}
	d.PrefillNewTokens = n - r.cached(d.Prefill, hashes, n)
	r.inst[d.Prefill].pending += d.PrefillNewTokens
	r.inst[d.Prefill].index.insert(hashes)
	if d.Prefill != d.Decode { // the KV lands in the decode instance's cache too
		r.inst[d.Decode].index.insert(hashes)
	}
	return d
}

// offloadTarget picks the prefill instance for a HEAVY request decoding on
// d: round-robin over the other instances, skipping overloaded ones (seed
// 003 §4.2's fix for P-instance concentration).
func (r *Router) offloadTarget(d int) (int, bool) {
	n := len(r.serve)
	for j := range n {
		i := r.serve[(r.prr+j)%n]
		if i == d || r.overloaded(i, r.serve) {
			continue
		}
		r.prr = (r.prr + j + 1) % n
		return i, true
	}
	return 0, false
}

// PrefillDone records that d's prefill finished: its pending tokens are
// done, and a separate prefill instance is free of it. Idempotent.
func (r *Router) PrefillDone(d *Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prefillDoneLocked(d)
}

func (r *Router) prefillDoneLocked(d *Decision) {
	if d.prefillDone {
		return
	}
	d.prefillDone = true
	r.inst[d.Prefill].pending -= d.PrefillNewTokens
	if d.Prefill != d.Decode {
		r.inst[d.Prefill].inflight--
	}
	if d.offload {
		r.offloads--
	}
}

// Finish records that d's request is over (served or failed).
func (r *Router) Finish(d *Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prefillDoneLocked(d)
	r.inst[d.Decode].inflight--
}
