package probes

import (
	"context"
	"math"
	"slices"
	"time"
)

// SchedLagPeriod is how often SchedLag wakes.
const SchedLagPeriod = 10 * time.Millisecond

// SchedLag measures mbench's own scheduling delay during a run: a
// goroutine woken by a ticker every Period notes how late it runs after
// the tick was due (a tick carries the time it was due). A process whose
// goroutines wait for a CPU, or for the Go scheduler, sees it late; the
// load generator's sends wait alike.
type SchedLag struct {
	Clock  Clock         // nil: the system clock
	Period time.Duration // 0: SchedLagPeriod
	lags   []time.Duration
}

// Run samples until ctx is done. Call Summary after it returns.
func (s *SchedLag) Run(ctx context.Context) {
	clk := orSystem(s.Clock)
	tk := clk.NewTicker(orPositive(s.Period, SchedLagPeriod))
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case due := <-tk.C():
			s.lags = append(s.lags, max(0, clk.Now().Sub(due)))
		}
	}
}

// SchedDelay is the distribution of SchedLag's lateness over a run, in ms.
type SchedDelay struct {
	PeriodMs float64 `json:"period_ms"`
	Samples  int     `json:"samples"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// Summary is the lateness's median, 99th percentile (nearest rank) and
// maximum; nil without samples.
func (s *SchedLag) Summary() *SchedDelay {
	if len(s.lags) == 0 {
		return nil
	}
	l := slices.Clone(s.lags)
	slices.Sort(l)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(l)))) - 1
		return ms(l[min(max(i, 0), len(l)-1)])
	}
	return &SchedDelay{PeriodMs: ms(orPositive(s.Period, SchedLagPeriod)), Samples: len(l), P50Ms: rank(0.5), P99Ms: rank(0.99), MaxMs: ms(l[len(l)-1])}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
