package probes

import "time"

// Clock is the time source of the sampler, the scraper and the gate, so
// tests can drive them with a fake clock.
type Clock interface {
	Now() time.Time
	// NewTicker returns a ticker firing every d.
	NewTicker(d time.Duration) Ticker
	// After fires once after d.
	After(d time.Duration) <-chan time.Time
}

// Ticker is the part of *time.Ticker that Clock users need.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTicker wraps time.NewTicker.
func (SystemClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

// After wraps time.After.
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// orPositive is v, or def when v ≤ 0 (a setting left unset).
func orPositive[T float64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

func orSystem(c Clock) Clock {
	if c == nil {
		return SystemClock{}
	}
	return c
}
