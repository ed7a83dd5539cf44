package openloop

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Arrival processes, as written in Arrival.Process.
const (
	ArrivalPoisson  = "poisson"
	ArrivalGamma    = "gamma"
	ArrivalConstant = "constant"
	// ArrivalConcurrency is the closed loop: Arrival.InFlight requests always
	// in flight, a new one sent as one finishes (closedloop.go). It has no
	// Schedule; the rate is not used.
	ArrivalConcurrency = "concurrency"
	// ArrivalTrace names a trace replay's arrivals in a summary (the trace's
	// own send times, scaled); it is not a Process.
	ArrivalTrace = "trace"
)

// Arrival selects the inter-arrival process of the open-loop schedule.
type Arrival struct {
	// Process is "poisson" (the default when empty), "gamma" or "constant".
	Process string
	// Burstiness is the gamma shape b > 0, vLLM's definition: gaps ~
	// Gamma(shape=b, scale=1/(rate·b)), so the mean gap is 1/rate and the
	// coefficient of variation 1/√b. b = 1 is Poisson; b < 1 is burstier.
	// Used only by "gamma".
	Burstiness float64
	// InFlight is the number of requests the closed loop keeps in flight;
	// used only by "concurrency" (≥ 1 there).
	InFlight int
	// MaxInFlight caps a rate process (poisson, gamma, constant, or an
	// infinite rate): a request whose send time comes while MaxInFlight
	// are in flight waits for one to finish, as vllm bench serve's
	// --max-concurrency does; Record.QueuedNs is that wait. 0: no cap.
	MaxInFlight int
	// Ramp, when set, raises the rate to the run's over its first
	// Ramp.Duration (ramp.go); not for a closed loop.
	Ramp *Ramp
}

// Validate reports a process or burstiness that cannot be used (a
// FieldError under "arrival").
func (a Arrival) Validate() error {
	const rateProcess = "a rate process (poisson, gamma, constant)"
	if a.InFlight != 0 && a.Process != ArrivalConcurrency {
		return fieldErr("arrival.in_flight", "process concurrency", "applies to process concurrency only, not %q", a.Process)
	}
	if a.Ramp != nil {
		if a.Process == ArrivalConcurrency {
			return fieldErr("arrival.ramp", rateProcess, "a closed loop has no rate to ramp")
		}
		if err := a.Ramp.Validate(); err != nil {
			return under("arrival", err)
		}
	}
	if a.MaxInFlight < 0 || a.MaxInFlight > MaxInFlight {
		return fieldErr("arrival.max_in_flight", "", "must be ≥ 0 and at most %d, got %d", MaxInFlight, a.MaxInFlight)
	}
	if a.InFlight > MaxInFlight {
		return fieldErr("arrival.in_flight", "", "at most %d requests in flight, got %d", MaxInFlight, a.InFlight)
	}
	if a.MaxInFlight > 0 && a.Process == ArrivalConcurrency {
		return fieldErr("arrival.max_in_flight", rateProcess+", or remove max_in_flight", "a closed loop keeps in_flight requests in flight; it takes no cap")
	}
	switch a.Process {
	case ArrivalConcurrency:
		if a.InFlight < 1 {
			return fieldErr("arrival.in_flight", "", "must be ≥ 1 for concurrency, got %d", a.InFlight)
		}
		return nil
	case "", ArrivalPoisson, ArrivalConstant:
		return nil
	case ArrivalGamma:
		if !(a.Burstiness > 0) || math.IsInf(a.Burstiness, 0) {
			return fieldErr("arrival.burstiness", "", "must be > 0 for gamma, got %v", a.Burstiness)
		}
		return nil
	}
	return fieldErr("arrival.process", "", "%q is not poisson, gamma, constant or concurrency", a.Process)
}

// CheckShape reports an arrival that the shape cannot have: a trace
// replays its own send times, so it has no rate to ramp and no closed loop.
func (a Arrival) CheckShape(s Shape) error {
	if s.Trace == nil {
		return nil
	}
	if a.Ramp != nil {
		return fieldErr("arrival.ramp", "shapes without trace", "a trace replays its own send times: no rate to ramp")
	}
	if a.Process == ArrivalConcurrency {
		return fieldErr("arrival.in_flight", "poisson, gamma or constant with a trace shape", "a trace replays its own send times; bound it with max_inflight_sessions instead of a closed loop")
	}
	return nil
}

// scheduleChunk is how many send offsets a Schedule computes at a time.
const scheduleChunk = 1024

// Schedule yields the absolute send offsets (ns from the schedule's start) of
// an arrival process at a given rate. It is a pure function of (arrival, rate,
// seed): it draws from a PCG generator seeded by the seed and computes offsets
// in chunks ahead of use, so the sequence is identical however far it is read.
// The first arrival is at offset 0. A Schedule is not safe for concurrent use.
type Schedule struct {
	a    Arrival
	rate float64
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
		a:    a,
		rate: rate,
		rng:  rand.New(rand.NewPCG(uint64(seed), saltSchedule)),
		buf:  make([]int64, 0, scheduleChunk),
	}
	if a.Ramp != nil && !math.IsInf(rate, 1) {
		s.ramp, s.rate = newRampMap(*a.Ramp, rate), 1
	}
	return s, nil
}

// Offsets returns the first n send offsets of the schedule (ns).
func Offsets(a Arrival, rate float64, seed int64, n int) ([]int64, error) {
	s, err := NewSchedule(a, rate, seed)
	if err != nil {
		return nil, err
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = s.Next()
	}
	return out, nil
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
		s.t += s.gapNs()
	}
}

// gapNs draws one inter-arrival gap in ns.
func (s *Schedule) gapNs() float64 {
	if math.IsInf(s.rate, 1) {
		return 0
	}
	mean := 1e9 / s.rate
	switch s.a.Process {
	case ArrivalConstant:
		return mean
	case ArrivalGamma:
		b := s.a.Burstiness
		return gammaVariate(s.rng, b) * mean / b
	default:
		return s.rng.ExpFloat64() * mean
	}
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
		if u < 1-0.0331*x*x*x*x {
			return d * v
		}
		if math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// Salts that separate the random streams drawn from one workload seed, so the
// schedule, the lengths, the tokens and the prefixes are independent.
const (
	saltSchedule  = 0x6d62656e63680001
	saltLengths   = 0x6d62656e63680002
	saltTokens    = 0x6d62656e63680003
	saltPrefix    = 0x6d62656e63680004
	saltFill      = 0x6d62656e63680005
	saltBlock     = 0x6d62656e63680006
	saltTracePad  = 0x6d62656e63680007
	saltSampleSes = 0x6d62656e63680008
	saltDataset   = 0x6d62656e63680009
)

// streamRNG returns the generator for item idx of the stream salt under seed.
func streamRNG(seed int64, salt uint64, idx uint64) *rand.Rand {
	return rand.New(rand.NewPCG(mix64(uint64(seed)^salt), mix64(idx+salt)))
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// ArrivalProcesses are the processes Arrival.Process accepts ("" is Poisson).
var ArrivalProcesses = []string{ArrivalPoisson, ArrivalGamma, ArrivalConstant, ArrivalConcurrency}

// ValidProcess reports whether p names an arrival process.
func ValidProcess(p string) bool {
	return p == "" || slices.Contains(ArrivalProcesses, p)
}
