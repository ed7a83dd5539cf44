// Package router is mbench's global scheduler in front of several engine
// instances: a cache-aware proxy (docs/routing.md). It routes OpenAI completion
// requests by a Policy — round-robin, session-sticky with a load-aware
// override, or cache-aware scoring (linear or LMetric) on top of stickiness —
// can offload HEAVY prefills to another instance (elastic P2P) or split every
// request into prefill on a producer and decode on a consumer (PD
// separation), and logs every routing decision.
//
// The router's view of the instances is its own shadow state: requests in
// flight, pending prefill tokens, and the prompt blocks it has sent to each
// instance (a prefix index, LRU-bounded to a given size or to the KV
// capacity the engine reports); with LoadEngine (LMetric's default) the
// load is the engine's own, read from its /metrics.
package router

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Policy names a routing policy.
type Policy string

// Policies.
const (
	// RoundRobin sends request k to instance k mod n.
	RoundRobin Policy = "round_robin"
	// Sticky pins a session to the instance its first request went to
	// (the least loaded then); the load-aware override moves it when its
	// instance is overloaded.
	Sticky Policy = "sticky"
	// Linear is Sticky, with new and overridden sessions placed by the
	// lowest score = load − α·cache_hit (the default of the agentic
	// experiments).
	Linear Policy = "linear"
	// LMetric is Sticky, with placement by the lowest score =
	// P_tokens × BS (Zhang et al., OSDI'26; docs/routing.md).
	LMetric Policy = "lmetric"
)

// Policies lists the valid policies.
var Policies = []Policy{RoundRobin, Sticky, Linear, LMetric}

// ParsePolicy validates a policy name.
func ParsePolicy(s string) (Policy, error) { return oneOf("policy", s, Policies) }

// oneOf returns s as a T when it is one of valid, else an error that names
// what s is and the valid names.
func oneOf[T ~string](what, s string, valid []T) (T, error) {
	if slices.Contains(valid, T(s)) {
		return T(s), nil
	}
	names := make([]string, len(valid))
	for i, v := range valid {
		names[i] = string(v)
	}
	return "", fmt.Errorf("%s %q is not one of %s", what, s, strings.Join(names, ", "))
}

// Options configures a Router. Zero values take the defaults below (those
// of the agentic experiments, docs/routing.md).
type Options struct {
	Policy Policy
	// Alpha weighs the cache hit (the share of the prompt the instance is
	// estimated to hold, 0..1) against load (requests in flight) in Linear:
	// a fully cached prompt is worth Alpha requests. Default 4.
	Alpha float64
	// OverrideFactor: a session's pinned instance whose load exceeds this
	// many times the mean load (and at least 2 requests) is overridden.
	// Default 2: "pinned instance > 2× avg load → redirect".
	OverrideFactor float64
	// BlockTokens is the block size of the router's prefix index. Default
	// 16, vLLM's block size.
	BlockTokens int
	// CacheBlocks bounds each instance's prefix index (LRU); 0 = unbounded.
	// Set it to an instance's KV capacity in blocks for a closer estimate,
	// or set CacheFromEngine.
	CacheBlocks int
	// CacheFromEngine bounds each instance's index to the KV capacity its
	// engine reports (vllm:cache_config_info: num_gpu_blocks × block_size
	// tokens) once its /metrics answers; unbounded until then.
	CacheFromEngine bool
	// Load is what counts as an instance's load: LoadEngine or
	// LoadShadow. Default: LoadEngine for LMetric, whose BS is the engine's
	// waiting + running + 1 (the agentic experiments' definition), else
	// LoadShadow.
	Load LoadSource
	// Offload sends the prefill of a HEAVY request (at least HeavyTokens
	// new tokens on its sticky instance: a bound belongs to the class above
	// it, as in Classes, so with the defaults exactly the HEAVY and HEAVY+
	// requests are offloaded) to another instance, and decodes on the
	// sticky one, with at most MaxOffload offloads in flight.
	Offload     bool
	HeavyTokens int // default 20000
	MaxOffload  int // default 4
	// Classes are the request-class bounds in new tokens: WARM below
	// Classes[0], MEDIUM below Classes[1], HEAVY below Classes[2], HEAVY+
	// from there (a bound belongs to the class above it, as
	// results.classIndex has it). Default 5000, 20000, 50000 (results.DefaultClassBounds).
	Classes [3]int
}

// withDefaults fills o's zero fields and validates it.
func (o Options) withDefaults() (Options, error) {
	o.Policy = cmp.Or(o.Policy, RoundRobin)
	if o.Load == "" {
		o.Load = LoadShadow
		if o.Policy == LMetric {
			o.Load = LoadEngine
		}
	}
	if _, err := ParseLoadSource(string(o.Load)); err != nil {
		return o, err
	}
	if o.CacheFromEngine && o.CacheBlocks > 0 {
		return o, fmt.Errorf("cache blocks: give a size or take it from the engines, not both")
	}
	if _, err := ParsePolicy(string(o.Policy)); err != nil {
		return o, err
	}
	o.Alpha, o.OverrideFactor = cmp.Or(o.Alpha, 4), cmp.Or(o.OverrideFactor, 2)
	o.BlockTokens, o.HeavyTokens, o.MaxOffload = cmp.Or(o.BlockTokens, 16), cmp.Or(o.HeavyTokens, 20000), cmp.Or(o.MaxOffload, 4)
	if o.Classes == [3]int{} {
		o.Classes = [3]int{5000, 20000, 50000}
	}
	switch {
	case o.Alpha < 0:
		return o, fmt.Errorf("alpha: must be ≥ 0, got %v", o.Alpha)
	case o.OverrideFactor < 1:
		return o, fmt.Errorf("override factor: must be ≥ 1, got %v", o.OverrideFactor)
	case o.BlockTokens < 1:
		return o, fmt.Errorf("block tokens: must be ≥ 1, got %d", o.BlockTokens)
	case o.CacheBlocks < 0:
		return o, fmt.Errorf("cache blocks: must be ≥ 0, got %d", o.CacheBlocks)
	case o.HeavyTokens < 1 || o.MaxOffload < 1:
		return o, fmt.Errorf("offload: heavy threshold and cap must be ≥ 1, got %d and %d", o.HeavyTokens, o.MaxOffload)
	case !(0 < o.Classes[0] && o.Classes[0] < o.Classes[1] && o.Classes[1] < o.Classes[2]):
		return o, fmt.Errorf("classes: bounds must be positive and increasing, got %v", o.Classes)
	}
	return o, nil
}

// Class is a request class by new (uncached) prompt tokens.
type Class string

// Request classes by new (uncached) prompt tokens.
const (
	Warm       Class = "WARM"
	Medium     Class = "MEDIUM"
	Heavy      Class = "HEAVY"
	HeavyLarge Class = "HEAVY+"
)

// classOf classifies newTokens under the bounds.
func classOf(newTokens int, b [3]int) Class {
	switch {
	case newTokens < b[0]:
		return Warm
	case newTokens < b[1]:
		return Medium
	case newTokens < b[2]:
		return Heavy
	}
	return HeavyLarge
}
