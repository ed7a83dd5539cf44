package openloop

import (
	"math"
	"time"
)

// PhaseRamp marks the requests sent while the rate ramps up (Arrival.Ramp),
// kept out of the measured window unless Config.IncludeRamp.
const PhaseRamp = "ramp"

// RampKind is how the rate rises during a ramp.
type RampKind string

// The ramp kinds.
const (
	RampLinear      RampKind = "linear"      // λ(t) = from + (rate − from)·t/D
	RampExponential RampKind = "exponential" // λ(t) = from·(rate/from)^(t/D)
)

// Ramp raises the offered rate from From to the run's rate over Duration,
// from the start of the schedule; after it the rate is the run's. The
// arrival process keeps its law in operational time: the schedule is the
// process at rate 1 mapped through the inverse of the integrated rate
// Λ(t) = ∫λ, so the expected number of arrivals in [t1, t2] is
// Λ(t2) − Λ(t1) (for Poisson arrivals, a Poisson process of intensity λ).
type Ramp struct {
	Kind     RampKind
	From     float64 // req/s at the start (≥ 0 linear, > 0 exponential)
	Duration time.Duration
}

// RampKinds lists the valid kinds.
var RampKinds = []RampKind{RampLinear, RampExponential}

// Validate reports a ramp that cannot be used (a FieldError under "ramp").
func (r Ramp) Validate() error { return first(r.problems()) }

func (r Ramp) problems() problems {
	var ps problems
	ps.check(r.Kind != RampLinear && r.Kind != RampExponential, fieldErr("ramp.kind", "linear or exponential", "%q is not linear or exponential", string(r.Kind)))
	ps.check(r.Duration <= 0, fieldErr("ramp.duration", "a duration > 0", "must be > 0, got %v", r.Duration))
	fromOK := !math.IsNaN(r.From) && !math.IsInf(r.From, 0) && r.From >= 0
	ps.check(!fromOK, fieldErr("ramp.from", "a rate ≥ 0", "must be a rate ≥ 0, got %v", r.From))
	ps.check(fromOK && r.Kind == RampExponential && r.From == 0, fieldErr("ramp.from", "a rate > 0", "an exponential ramp starts at a rate > 0"))
	return ps
}

// rampMap maps operational time (expected arrivals) to schedule time for a
// ramp to rate.
type rampMap struct {
	kind    RampKind
	r0, r   float64 // req/s at the start and after the ramp
	d       float64 // ramp duration, s
	lambdaD float64 // Λ(d): expected arrivals during the ramp
	k       float64 // exponential: ln(r/r0)/d
}

func newRampMap(rp Ramp, rate float64) *rampMap {
	m := &rampMap{kind: rp.Kind, r0: rp.From, r: rate, d: rp.Duration.Seconds()}
	if rp.Kind == RampExponential {
		m.k = math.Log(rate/rp.From) / m.d
		if math.Abs(m.k*m.d) < 1e-12 {
			m.k = 0
		}
	}
	m.lambdaD = m.integral(m.d)
	return m
}

// integral is Λ(t), the expected arrivals in [0, t] (t in s).
func (m *rampMap) integral(t float64) float64 {
	if t > m.d {
		return m.lambdaD + (t-m.d)*m.r
	}
	if m.kind == RampExponential {
		if m.k == 0 {
			return m.r0 * t
		}
		return m.r0 * math.Expm1(m.k*t) / m.k
	}
	return m.r0*t + (m.r-m.r0)*t*t/(2*m.d)
}

// inverse is Λ⁻¹(u): the time (s) by which u arrivals are expected.
func (m *rampMap) inverse(u float64) float64 {
	if u <= 0 {
		return 0
	}
	if u >= m.lambdaD {
		return m.d + (u-m.lambdaD)/m.r
	}
	if m.kind == RampExponential {
		if m.k == 0 {
			return u / m.r0
		}
		return math.Log1p(m.k*u/m.r0) / m.k
	}
	// r0·t + a·t² = u with a = (r − r0)/(2d), in the form that is stable
	// for a → 0 and r0 → 0.
	a := (m.r - m.r0) / (2 * m.d)
	return 2 * u / (m.r0 + math.Sqrt(max(m.r0*m.r0+4*a*u, 0)))
}
