package probes

import (
	"sync"
	"sync/atomic"
	"time"
)

// fakeClock is a manual clock. Tickers fire only when the test calls Tick;
// After fires at once and advances the clock by d when auto is set (for the
// gate's poll loop), else when Advance passes its deadline.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	auto    bool
	tickers []*fakeTicker
	afters  []fakeAfter
}

type fakeAfter struct {
	at time.Time
	ch chan time.Time
}

type fakeTicker struct {
	ch      chan time.Time
	stopped atomic.Bool
}

func (t *fakeTicker) C() <-chan time.Time { return t.ch }
func (t *fakeTicker) Stop()               { t.stopped.Store(true) }

func newFakeClock(auto bool) *fakeClock {
	return &fakeClock{now: time.Date(2026, 5, 26, 17, 28, 0, 0, time.UTC), auto: auto}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTicker(d time.Duration) Ticker {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTicker{ch: make(chan time.Time)}
	c.tickers = append(c.tickers, t)
	return t
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if c.auto {
		c.now = c.now.Add(d)
		ch <- c.now
		return ch
	}
	c.afters = append(c.afters, fakeAfter{c.now.Add(d), ch})
	return ch
}

// Advance moves the clock and fires due Afters.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.afters[:0]
	for _, a := range c.afters {
		if !a.at.After(c.now) {
			a.ch <- c.now
		} else {
			kept = append(kept, a)
		}
	}
	c.afters = kept
}

// Tick advances the clock by d and delivers one tick to every ticker
// (blocking until the ticker's reader takes it).
func (c *fakeClock) Tick(d time.Duration) {
	c.Advance(d)
	c.mu.Lock()
	ts := append([]*fakeTicker(nil), c.tickers...)
	now := c.now
	c.mu.Unlock()
	for _, t := range ts {
		if !t.stopped.Load() {
			t.ch <- now
		}
	}
}

// waitTicker blocks until n tickers exist.
func (c *fakeClock) waitTicker(n int) {
	for {
		c.mu.Lock()
		k := len(c.tickers)
		c.mu.Unlock()
		if k >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
