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

// Validate reports the first field of the shape that cannot be used, as a
// FieldError whose path names it as the matrix does ("prefix.prefix_tokens").
func (s Shape) Validate() error {
	if s.Trace != nil {
		t := s.Trace
		switch {
		case s.Dataset != nil:
			return fieldErr("trace", "", "a shape replays a trace or samples a dataset, not both")
		case t.Path == "":
			return fieldErr("trace.path", "", "must be set")
		case t.TimeScale < 0 || math.IsNaN(t.TimeScale) || math.IsInf(t.TimeScale, 0):
			return fieldErr("trace.time_scale", "", "must be > 0 (or 0 for 1), got %v", t.TimeScale)
		case t.RequestLimit < 0:
			return fieldErr("trace.request_limit", "", "must be ≥ 0, got %d", t.RequestLimit)
		case t.MaxInflightSessions < 0:
			return fieldErr("trace.max_inflight_sessions", "", "must be ≥ 0, got %d", t.MaxInflightSessions)
		}
		return nil
	}
	if d := s.Dataset; d != nil {
		switch {
		case s.Input != 0 || s.InputDist != nil || s.OutputDist != nil || s.Prefix != nil || s.CacheFill != nil:
			return fieldErr("dataset", "", "the prompts come from the file; only output may be set beside it")
		case s.Output < 0 || s.Output > maxTokens:
			return fieldErr("output", "", "must be in [1, %d] tokens (or 0 for the file's), got %d", maxTokens, s.Output)
		}
		return d.Validate()
	}
	if err := checkLen("input", s.Input, s.InputDist); err != nil {
		return err
	}
	if err := checkLen("output", s.Output, s.OutputDist); err != nil {
		return err
	}
	if p := s.Prefix; p != nil {
		if p.NumPrefixes < 1 {
			return fieldErr("prefix.num_prefixes", "", "must be ≥ 1, got %d", p.NumPrefixes)
		}
		if p.PrefixTokens < 1 || p.PrefixTokens > maxTokens {
			return fieldErr("prefix.prefix_tokens", "", "must be in [1, %d], got %d", maxTokens, p.PrefixTokens)
		}
		if s.InputDist == nil && p.PrefixTokens > s.Input {
			return fieldErr("prefix.prefix_tokens", "", "%d exceeds input %d (input is the whole prompt)", p.PrefixTokens, s.Input)
		}
	}
	if f := s.CacheFill; f != nil {
		if f.Prefixes < 0 {
			return fieldErr("cache_fill.prefixes", "", "must be ≥ 0, got %d", f.Prefixes)
		}
		if f.Prefixes > 0 && (f.PrefixTokens < 1 || f.PrefixTokens > maxTokens) {
			return fieldErr("cache_fill.prefix_tokens", "", "must be in [1, %d], got %d", maxTokens, f.PrefixTokens)
		}
	}
	return nil
}

func checkLen(name string, fixed int, d *Dist) error {
	if d == nil {
		if fixed < 1 || fixed > maxTokens {
			return fieldErr(name, "", "must be in [1, %d] tokens, got %d", maxTokens, fixed)
		}
		return nil
	}
	return under(name+"_dist", "", d.Validate())
}

// Validate reports a distribution that cannot be sampled, as a FieldError
// at its key ("p90"), named with its kind ("lognormal: p90: …").
func (d Dist) Validate() error {
	key := "max" // the key that a rule over both min and max names
	if d.Min < 0 || d.Kind == "uniform" && d.Min < 1 {
		key = "min"
	}
	if d.Min < 0 || d.Max < 0 || d.Max > maxTokens {
		return namedErr(key, "min/max", "", "must be in [0, %d], got %d/%d", maxTokens, d.Min, d.Max)
	}
	switch d.Kind {
	case "uniform":
		if d.Min < 1 || d.Max < d.Min {
			return namedErr(key, "uniform", "", "need 1 ≤ min ≤ max, got min %d max %d", d.Min, d.Max)
		}
	case "lognormal":
		if !(d.Median >= 1) || math.IsInf(d.Median, 0) {
			return namedErr("median", "lognormal: median", "", "must be ≥ 1, got %v", d.Median)
		}
		if !(d.P90 > d.Median) || math.IsInf(d.P90, 0) {
			return namedErr("p90", "lognormal: p90", "", "must be > median %v, got %v", d.Median, d.P90)
		}
		if d.Max > 0 && d.Max < d.Min {
			return namedErr("max", "lognormal", "", "max %d is below min %d", d.Max, d.Min)
		}
	default:
		return fieldErr("kind", "", "%q is not uniform or lognormal", d.Kind)
	}
	return nil
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
		v := math.Round(math.Exp(mu + sigma*r.NormFloat64()))
		if v > maxTokens {
			v = maxTokens
		}
		n = int(v)
		if n < d.Min {
			n = d.Min
		}
		if d.Max > 0 && n > d.Max {
			n = d.Max
		}
	}
	return max(n, 1)
}
