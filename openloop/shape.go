package openloop

import (
	"math"
	"math/rand/v2"
)

// Shape is the workload of a run: what each request asks for. The matrix maps
// its shapes onto this struct. With Trace set, the trace decides lengths,
// prompts and send times, and the other fields are ignored.
type Shape struct {
	Name string
	// Input and Output are the fixed prompt and completion lengths in tokens
	// (Input is the total prompt, shared prefix included).
	Input, Output int
	// InputDist and OutputDist, when set, replace Input and Output with a
	// length drawn per request.
	InputDist, OutputDist *Dist
	// Prefix makes prompts share prefixes: each request takes one of
	// NumPrefixes groups (seeded choice), whose first PrefixTokens ids are
	// identical, followed by a random suffix up to Input tokens.
	Prefix *Prefix
	// CacheFill issues requests before the open-loop phases so that the
	// engine's prefix cache holds that many distinct prefixes (phase "fill").
	CacheFill *CacheFill
	// Trace replays a Mooncake-format trace instead (Config.Rate is then a
	// rate multiplier on top of Trace.TimeScale).
	Trace *Trace
	// Dataset draws each request's prompt (text) from a file, with the
	// run's seed; Output, when set, overrides the file's output lengths.
	// Input, the distributions, Prefix and CacheFill do not apply.
	Dataset *Dataset
}

// Dist is a length distribution in tokens.
type Dist struct {
	// Kind is "uniform" (integers in [Min, Max]) or "lognormal" (given by its
	// Median and P90, then clipped to [Min, Max] where those are set).
	Kind     string
	Min, Max int
	// Median and P90 define the lognormal: mu = ln(median), sigma =
	// ln(p90/median)/z(0.9).
	Median, P90 float64
}

// Prefix describes a shared-prefix workload.
type Prefix struct {
	NumPrefixes  int // number of distinct prefix groups (≥ 1)
	PrefixTokens int // shared tokens at the start of every prompt of a group
}

// CacheFill describes the requests sent before the measured window to leave
// Prefixes distinct prefixes of PrefixTokens tokens in the prefix cache. They
// never share tokens with the measured prompts.
type CacheFill struct {
	Prefixes, PrefixTokens int
}

// Trace describes a trace replay.
type Trace struct {
	Path string // Mooncake-format JSONL (see ParseTrace)
	// TimeScale compresses time: a request at timestamp t ms is sent at
	// t/TimeScale/rate_multiplier. 0 means 1.
	TimeScale float64
	// RequestLimit caps the requests replayed (the earliest ones); 0 = all.
	RequestLimit int
	// MaxInflightSessions caps the sessions with a request in flight or
	// waiting for its next turn; 0 = no cap.
	MaxInflightSessions int
}

// Token ids are drawn uniformly from [TokenIDMin, TokenIDMax), a range that
// holds ordinary tokens in the vocabularies of common models.
const (
	TokenIDMin = 1000
	TokenIDMax = 31000
)

// maxTokens bounds any one length, so a typo cannot allocate gigabytes.
const maxTokens = 4 << 20

// z90 is the 0.9 quantile of the standard normal distribution.
const z90 = 1.2815515655446004

// Validate reports the first field of the shape that cannot be used (the
// first of Problems).
func (s Shape) Validate() error { return first(s.Problems()) }

// Problems lists every field of the shape that cannot be used, each a
// FieldError whose path names it as the matrix does ("prefix.prefix_tokens").
// A rule over two fields (prefix_tokens within input, p90 above median) is
// checked once the other holds on its own, so that a bad value is reported
// once; a shape that replays a trace or samples a dataset beside settings
// of its own has that one problem.
func (s Shape) Problems() []*FieldError {
	var ps problems
	if t := s.Trace; t != nil {
		if s.Dataset != nil {
			return []*FieldError{fieldErr("trace", "", "a shape replays a trace or samples a dataset, not both")}
		}
		ps.check(t.Path == "", fieldErr("trace.path", "", "must be set"))
		ps.check(t.TimeScale < 0 || math.IsNaN(t.TimeScale) || math.IsInf(t.TimeScale, 0), fieldErr("trace.time_scale", "", "must be > 0 (or 0 for 1), got %v", t.TimeScale))
		ps.check(t.RequestLimit < 0, fieldErr("trace.request_limit", "", "must be ≥ 0, got %d", t.RequestLimit))
		ps.check(t.MaxInflightSessions < 0, fieldErr("trace.max_inflight_sessions", "", "must be ≥ 0, got %d", t.MaxInflightSessions))
		return ps
	}
	if d := s.Dataset; d != nil {
		if s.Input != 0 || s.InputDist != nil || s.OutputDist != nil || s.Prefix != nil || s.CacheFill != nil {
			return []*FieldError{fieldErr("dataset", "", "the prompts come from the file; only output may be set beside it")}
		}
		ps.check(s.Output < 0 || s.Output > maxTokens, fieldErr("output", "", "must be in [1, %d] tokens (or 0 for the file's), got %d", maxTokens, s.Output))
		return append(ps, d.problems()...)
	}
	ps = append(lenProblems("input", s.Input, s.InputDist), lenProblems("output", s.Output, s.OutputDist)...)
	if p := s.Prefix; p != nil {
		ps.check(p.NumPrefixes < 1, fieldErr("prefix.num_prefixes", "", "must be ≥ 1, got %d", p.NumPrefixes))
		tokensOK := p.PrefixTokens >= 1 && p.PrefixTokens <= maxTokens
		ps.check(!tokensOK, fieldErr("prefix.prefix_tokens", "", "must be in [1, %d], got %d", maxTokens, p.PrefixTokens))
		ps.check(tokensOK && s.InputDist == nil && s.Input >= 1 && p.PrefixTokens > s.Input,
			fieldErr("prefix.prefix_tokens", "", "%d exceeds input %d (input is the whole prompt)", p.PrefixTokens, s.Input))
	}
	if f := s.CacheFill; f != nil {
		ps.check(f.Prefixes < 0, fieldErr("cache_fill.prefixes", "", "must be ≥ 0, got %d", f.Prefixes))
		ps.check(f.Prefixes > 0 && (f.PrefixTokens < 1 || f.PrefixTokens > maxTokens), fieldErr("cache_fill.prefix_tokens", "", "must be in [1, %d], got %d", maxTokens, f.PrefixTokens))
	}
	return ps
}

// lenProblems are those of a length: fixed, or drawn from d when set.
func lenProblems(name string, fixed int, d *Dist) problems {
	if d != nil {
		return d.problems().under(name+"_dist", "")
	}
	var ps problems
	ps.check(fixed < 1 || fixed > maxTokens, fieldErr(name, "", "must be in [1, %d] tokens, got %d", maxTokens, fixed))
	return ps
}

// Validate reports a distribution that cannot be sampled, as a FieldError
// at its key ("p90"), named with its kind ("lognormal: p90: …").
func (d Dist) Validate() error { return first(d.problems()) }

// problems lists every rule of the distribution that it breaks, in the
// order Validate checks them.
func (d Dist) problems() problems {
	var ps problems
	key := "max" // the key that a rule over both min and max names
	if d.Min < 0 || d.Kind == "uniform" && d.Min < 1 {
		key = "min"
	}
	inRange := d.Min >= 0 && d.Max >= 0 && d.Max <= maxTokens
	ps.check(!inRange, namedErr(key, "min/max", "", "must be in [0, %d], got %d/%d", maxTokens, d.Min, d.Max))
	switch d.Kind {
	case "uniform":
		ps.check(inRange && (d.Min < 1 || d.Max < d.Min), namedErr(key, "uniform", "", "need 1 ≤ min ≤ max, got min %d max %d", d.Min, d.Max))
	case "lognormal":
		medianOK := d.Median >= 1 && !math.IsInf(d.Median, 0)
		ps.check(!medianOK, namedErr("median", "lognormal: median", "", "must be ≥ 1, got %v", d.Median))
		ps.check(medianOK && (!(d.P90 > d.Median) || math.IsInf(d.P90, 0)), namedErr("p90", "lognormal: p90", "", "must be > median %v, got %v", d.Median, d.P90))
		ps.check(inRange && d.Max > 0 && d.Max < d.Min, namedErr("max", "lognormal", "", "max %d is below min %d", d.Max, d.Min))
	default:
		ps.check(true, fieldErr("kind", "", "%q is not uniform or lognormal", d.Kind))
	}
	return ps
}

// Sample draws one length from d (at least 1 token).
func (d Dist) Sample(r *rand.Rand) int {
	var n int
	switch d.Kind {
	case "uniform":
		n = d.Min + r.IntN(d.Max-d.Min+1)
	default:
		mu := math.Log(d.Median)
		sigma := math.Log(d.P90/d.Median) / z90
		n = max(int(min(math.Round(math.Exp(mu+sigma*r.NormFloat64())), maxTokens)), d.Min)
		if d.Max > 0 {
			n = min(n, d.Max)
		}
	}
	return max(n, 1)
}
