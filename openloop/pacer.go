package openloop

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// The pacer: when each request is sent. A rate process (Poisson, gamma,
// constant, a burst) is paced by its Schedule, one gapLaw per process,
// ramped by ramp.go; the closed loop by its free slots (closedloop.go); a
// trace by its own times (replay.go). The waiter (wait.go) waits until then.

// scheduleChunk is how many send offsets a Schedule computes at a time.
const scheduleChunk = 1024

// Schedule yields the absolute send offsets (ns from the schedule's start) of
// an arrival process at a given rate. It is a pure function of (arrival, rate,
// seed): it draws from a PCG generator seeded by the seed and computes offsets
// in chunks ahead of use, so the sequence is identical however far it is read.
// The first arrival is at offset 0. A Schedule is not safe for concurrent use.
type Schedule struct {
	law  gapLaw
	mean float64  // the mean gap, ns
	ramp *rampMap // nil: none; else t is operational time at rate 1
	rng  *rand.Rand
	t    float64 // ns offset of the next arrival
	buf  []int64
	pos  int
}

// NewSchedule returns the schedule for rate requests per second. A rate of
// +Inf sends everything at offset 0.
func NewSchedule(a Arrival, rate float64, seed int64) (*Schedule, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	if a.Process == ArrivalConcurrency {
		return nil, fmt.Errorf("arrival: a closed loop (concurrency) has no schedule")
	}
	if !(rate > 0) {
		return nil, fmt.Errorf("rate: must be > 0 req/s, got %v", rate)
	}
	s := &Schedule{
		law: lawOf(a, rate),
		rng: rand.New(rand.NewPCG(uint64(seed), saltSchedule)),
		buf: make([]int64, 0, scheduleChunk),
	}
	if a.Ramp != nil && !math.IsInf(rate, 1) {
		s.ramp, rate = newRampMap(*a.Ramp, rate), 1
	}
	s.mean = 1e9 / rate
	return s, nil
}

// Next returns the next send offset in ns.
func (s *Schedule) Next() int64 {
	if s.pos == len(s.buf) {
		s.fill()
	}
	v := s.buf[s.pos]
	s.pos++
	return v
}

func (s *Schedule) fill() {
	s.buf = s.buf[:0]
	s.pos = 0
	for range scheduleChunk {
		t := s.t
		if s.ramp != nil {
			t = 1e9 * s.ramp.inverse(t/1e9)
		}
		s.buf = append(s.buf, int64(math.Round(t)))
		s.t += s.law(s.rng, s.mean)
	}
}

// A gapLaw draws one gap between sends, in ns, for a mean gap of mean ns:
// the law of one arrival process (lawOf).
type gapLaw func(r *rand.Rand, mean float64) float64

// lawOf is the law of a's process at rate (req/s, > 0).
func lawOf(a Arrival, rate float64) gapLaw {
	switch b := a.Burstiness; {
	case math.IsInf(rate, 1): // a burst: every send at offset 0
		return func(*rand.Rand, float64) float64 { return 0 }
	case a.Process == ArrivalConstant:
		return func(_ *rand.Rand, mean float64) float64 { return mean }
	case a.Process == ArrivalGamma: // Gamma(shape b, scale mean/b)
		return func(r *rand.Rand, mean float64) float64 { return gammaVariate(r, b) * mean / b }
	}
	return func(r *rand.Rand, mean float64) float64 { return r.ExpFloat64() * mean } // Poisson
}

// gammaVariate draws from Gamma(shape k, scale 1) by Marsaglia and Tsang's
// method, with the usual U^(1/k) boost for k < 1.
func gammaVariate(r *rand.Rand, k float64) float64 {
	if k < 1 {
		u := r.Float64()
		return gammaVariate(r, k+1) * math.Pow(u, 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
