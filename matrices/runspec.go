package matrices

import (
	"math"

	"github.com/mbench/mbench/openloop"
)

// RunConfig is the load generator's spec of one run of cell c: its rate,
// arrival, shape and the measure section's warmup, stop conditions and caps,
// in openloop's own types (the matrix holds no copies of them). The caller
// adds what only it knows: targets, the request, the seed, the block, sinks.
//
// The matrix's arrival is a template: in a closed loop a cell's rate is its
// in-flight level; a burst is every measured request (min_completed of
// them) due at once, an infinite rate.
func (m *Matrix) RunConfig(c Cell) openloop.Config {
	ms := m.Measure
	cfg := openloop.Config{
		Rate:           c.Rate,
		Arrival:        m.Arrival,
		Shape:          c.Spec,
		Warmup:         ms.WarmupRequests,
		IncludeRamp:    ms.IncludeRamp,
		MinCompleted:   m.MinCompleted(c),
		Timeout:        ms.Timeout,
		DrainTimeout:   ms.DrainTimeout,
		AbortIf:        ms.AbortIf,
		RequestTimeout: ms.RequestTimeout,
		Cell:           c.ID,
	}
	if m.Arrival.Process == openloop.ArrivalConcurrency {
		cfg.Rate, cfg.Arrival.InFlight = 0, int(c.Rate)
	}
	if m.Arrival.Process == ArrivalBurst {
		cfg.Arrival.Process = openloop.ArrivalPoisson
		cfg.Rate, cfg.Requests, cfg.MinCompleted = math.Inf(1), ms.MinCompleted, 0
	}
	return cfg
}

// MinCompleted is the measured requests a run of c must complete to be a
// result (measure.min_completed), but none for a trace replay, which runs to
// its request_limit or its end rather than stopping early. A burst sends
// this many at once.
func (m *Matrix) MinCompleted(c Cell) int {
	if c.Spec.Trace != nil {
		return 0
	}
	return m.Measure.MinCompleted
}
