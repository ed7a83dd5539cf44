package probes

import (
	"context"
	"sync"
	"testing"
	"time"
)

// scriptedClock delivers ticks the test sends and answers each Now with
// the next of a script of times.
type scriptedClock struct {
	mu  sync.Mutex
	now []time.Time
	ch  chan time.Time
}

func (c *scriptedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now[0]
	c.now = c.now[1:]
	return t
}
func (c *scriptedClock) NewTicker(time.Duration) Ticker       { return scriptedTicker{c.ch} }
func (c *scriptedClock) After(time.Duration) <-chan time.Time { return nil }

type scriptedTicker struct{ ch chan time.Time }

func (t scriptedTicker) C() <-chan time.Time { return t.ch }
func (scriptedTicker) Stop()                 {}

// TestSchedLag: ticks that are read 1..100 ms after they were due (and one
// read before, which counts as on time) give p50 50 ms, p99 99 ms and max
// 100 ms over 101 samples.
func TestSchedLag(t *testing.T) {
	base := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	clk := &scriptedClock{ch: make(chan time.Time)}
	var due []time.Time
	for i := 0; i <= 100; i++ {
		d := base.Add(time.Duration(i) * 10 * time.Millisecond)
		due = append(due, d)
		lag := time.Duration(i) * time.Millisecond
		if i == 0 {
			lag = -time.Millisecond
		}
		clk.now = append(clk.now, d.Add(lag))
	}
	s := &SchedLag{Clock: clk}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	for _, d := range due {
		clk.ch <- d
	}
	cancel()
	<-done
	got := s.Summary()
	want := SchedDelay{PeriodMs: 10, Samples: 101, P50Ms: 50, P99Ms: 99, MaxMs: 100}
	if got == nil || *got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if (&SchedLag{}).Summary() != nil {
		t.Error("a summary without samples")
	}
}
