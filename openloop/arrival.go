package openloop

import (
	"math"
	"math/rand/v2"
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
// FieldError under "arrival"): the first of Problems.
func (a Arrival) Validate() error { return first(a.Problems()) }

// Problems lists every rule of the arrival that it breaks, in the order
// Validate checks them (a closed loop's ramp once, not its keys as well).
func (a Arrival) Problems() []*FieldError {
	const rateProcess = "a rate process (poisson, gamma, constant)"
	var ps problems
	closed := a.Process == ArrivalConcurrency
	ps.check(a.InFlight != 0 && !closed, fieldErr("arrival.in_flight", "process concurrency", "applies to process concurrency only, not %q", a.Process))
	if a.Ramp != nil {
		ps.check(closed, fieldErr("arrival.ramp", rateProcess, "a closed loop has no rate to ramp"))
		if !closed {
			ps = append(ps, a.Ramp.problems().under("arrival", "")...)
		}
	}
	capOK := a.MaxInFlight >= 0 && a.MaxInFlight <= MaxInFlight
	ps.check(!capOK, fieldErr("arrival.max_in_flight", "", "must be ≥ 0 and at most %d, got %d", MaxInFlight, a.MaxInFlight))
	ps.check(closed && a.InFlight > MaxInFlight, fieldErr("arrival.in_flight", "", "at most %d requests in flight, got %d", MaxInFlight, a.InFlight))
	ps.check(capOK && a.MaxInFlight > 0 && closed, fieldErr("arrival.max_in_flight", rateProcess+", or remove max_in_flight", "a closed loop keeps in_flight requests in flight; it takes no cap"))
	switch a.Process {
	case ArrivalConcurrency:
		ps.check(a.InFlight < 1, fieldErr("arrival.in_flight", "", "must be ≥ 1 for concurrency, got %d", a.InFlight))
	case "", ArrivalPoisson, ArrivalConstant:
	case ArrivalGamma:
		ps.check(!(a.Burstiness > 0) || math.IsInf(a.Burstiness, 0), fieldErr("arrival.burstiness", "", "must be > 0 for gamma, got %v", a.Burstiness))
	default:
		ps.check(true, fieldErr("arrival.process", "", "%q is not poisson, gamma, constant or concurrency", a.Process))
	}
	return ps
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
