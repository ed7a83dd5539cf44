package openloop

import (
	"runtime"
	"sync/atomic"
	"time"
)

// clock gives monotonic ns since the run's start.
type clock struct{ start time.Time }

func (c *clock) now() int64 { return int64(time.Since(c.start)) }

// Waiting strategies of the waiter, chosen by measurement (see precision.go):
// Go's timers wake up to ~1 ms late on Linux (the netpoller sleeps in whole
// milliseconds), so a timer alone cannot hit a deadline to the microsecond.
const (
	// waitSpin sleeps on a Go timer until spinAhead before the deadline,
	// then yields (runtime.Gosched) in a loop, and busy-waits the last
	// pureSpin. Precise and portable; it keeps one P busy for up to
	// spinAhead per send, yielding it to any runnable goroutine.
	waitSpin = iota
	// waitNanosleep replaces the yield loop with nanosleep(2) on a thread
	// whose timer slack is 1 ns (Linux), then busy-waits the last pureSpin.
	// Cheaper in CPU; a thread in a syscall holds its P until sysmon retakes
	// it, which can delay other goroutines on a busy machine.
	waitNanosleep
	// waitTimerfd replaces the yield loop with a read of a Linux timerfd
	// through Go's netpoller: the goroutine is parked, its P stays free for
	// other goroutines and network polling, and epoll wakes it within a few
	// µs of the deadline; the last pureSpin is busy-waited.
	waitTimerfd
)

// defaultWaitMode is the wait mode Run uses: timerfd where available
// (measured best on 2 cores: send lag p99 0.26 ms and TTFT error p99 0.58 ms
// at 2,000 req/s, against 2.7/18 ms for spin and 0.55/1.4 ms for nanosleep).
const defaultWaitMode = waitTimerfd

// Waiter tuning. spinAhead covers the timer's 1 ms granularity plus margin.
const (
	spinAhead = 1200 * time.Microsecond
	pureSpin  = 25 * time.Microsecond
)

// waiter waits until send times on a run's clock, to the microsecond, and
// gives up when the run stops sending: the pacer (pacer.go) says when, the
// waiter waits until then. One waiter per goroutine (it owns a timer).
type waiter struct {
	clk     *clock
	stop    <-chan struct{}
	stopped *atomic.Bool
	mode    int
	timer   *time.Timer
	tfd     *timerfd // waitTimerfd only
}

func newWaiter(clk *clock, stop <-chan struct{}, stopped *atomic.Bool, mode int) *waiter {
	t := time.NewTimer(time.Hour)
	t.Stop()
	p := &waiter{clk: clk, stop: stop, stopped: stopped, mode: mode, timer: t}
	if mode == waitTimerfd {
		tfd, err := newTimerfd()
		if err != nil {
			p.mode = waitSpin
		} else {
			p.tfd = tfd
		}
	}
	return p
}

// close releases the waiter's timer file, if any.
func (p *waiter) close() {
	if p.tfd != nil {
		p.tfd.close()
	}
}

// lockThread prepares the calling goroutine for precise waits; the returned
// function undoes it. Only the nanosleep mode needs a dedicated thread.
func (p *waiter) lockThread() func() {
	if p.mode != waitNanosleep || !haveNanosleep {
		return func() {}
	}
	runtime.LockOSThread()
	setTimerSlack()
	return runtime.UnlockOSThread
}

// wait blocks until the clock reaches due (ns) and returns true, or returns
// false as soon as the run stops sending. A deadline already past returns at
// once: a late send fires immediately and its lateness is recorded.
func (p *waiter) wait(due int64) bool {
	for {
		rem := time.Duration(due - p.clk.now())
		if rem <= 0 {
			return !p.stopped.Load()
		}
		if rem > spinAhead+500*time.Microsecond {
			p.timer.Reset(rem - spinAhead)
			select {
			case <-p.timer.C:
			case <-p.stop:
				p.timer.Stop()
				return false
			}
			continue
		}
		if p.stopped.Load() {
			return false
		}
		switch {
		case rem <= pureSpin:
			// busy-wait: the OS cannot wake us this precisely
		case p.mode == waitTimerfd:
			if p.tfd.sleep(rem-pureSpin) != nil {
				p.mode = waitSpin
			}
		case p.mode == waitNanosleep && haveNanosleep:
			nanosleep(min(rem-pureSpin, 200*time.Microsecond))
		default:
			runtime.Gosched()
		}
	}
}
