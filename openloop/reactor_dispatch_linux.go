//go:build linux

package openloop

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// dispatch is the open loop's sending, done by the reactor's own thread:
// it waits for each send time on the reactor's timerfd, in the same
// epoll_wait as the streams' tokens, writes the request and starts its
// coroutine. The dispatcher goroutine of the other modes woke once per
// request through Go's scheduler and then woke the reactor; here a send
// costs one wake of the thread that reads the streams anyway.
type dispatch struct {
	jobs  <-chan []*job
	batch []*job            // the rest of the batch taken last
	send  func(j *job) bool // starts j (on the reactor); false: stop sending
	gate  func(j *job) bool // false: j may not go yet (it rings when it may)
	stop  atomic.Bool       // asked to end (the run stopped sending)
	done  chan struct{}     // closed when dispatching has ended
	spent bool              // it ended because jobs was closed (read after done)
	armed int64             // the timer's deadline on clk, 0 when not armed
	clk   *clock
}

// jobPoll is how soon the dispatch looks again when the next request is not
// built yet (the builder runs ahead, so this is rare).
const jobPoll = 100 * time.Microsecond

// dispatch has the reactor send the batches of jobs, each at its sched
// time on clk, by calling send on the reactor's goroutine once gate allows.
// d.done is closed when jobs is exhausted (d.spent), send returned false,
// or d.stop was set (and the reactor rung).
func (re *reactor) dispatch(clk *clock, jobs <-chan []*job, gate, send func(j *job) bool) *dispatch {
	d := &dispatch{jobs: jobs, send: send, gate: gate, done: make(chan struct{}), clk: clk}
	re.mu.Lock()
	re.newDisp = d
	re.mu.Unlock()
	re.ring()
	return d
}

// runOpenReactor is runOpen's sending when the reactor paces it (the
// default mode, on Linux): it returns when the dispatch has ended, and
// reports whether jobs ran out (rather than the run stopping).
func (r *runner) runOpenReactor(jobs <-chan []*job) (spent bool) {
	// The first measured request waits until Config.OnPhase has returned,
	// as in the other modes, but off the reactor: the streams in flight are
	// read meanwhile.
	var measuring atomic.Int32 // 0 not yet, 1 OnPhase running, 2 done
	gate := func(j *job) bool {
		if j.phase != PhaseMeasure {
			return true
		}
		switch measuring.Load() {
		case 2:
			return true
		case 1:
			return false
		}
		if r.cfg.OnPhase == nil {
			r.enterMeasure()
			measuring.Store(2)
			return true
		}
		measuring.Store(1)
		go func() {
			r.enterMeasure()
			measuring.Store(2)
			r.re.ring()
		}()
		return false
	}
	send := func(j *job) bool {
		if r.stopped.Load() {
			return false
		}
		r.re.start(r.launchFunc(j, nil))
		return !r.overInflight()
	}
	d := r.re.dispatch(&r.clk, jobs, gate, send)
	select {
	case <-d.done:
	case <-r.stopCh:
		d.stop.Store(true)
		r.re.ring()
		<-d.done
	}
	return d.spent
}

// pace sends what is due and arms the timer for the next send. It runs on
// the loop's goroutine before every wait.
func (re *reactor) pace() {
	d := re.disp
	if d == nil {
		return
	}
	for {
		if d.stop.Load() {
			re.endPace(d)
			return
		}
		if len(d.batch) == 0 {
			select {
			case b, ok := <-d.jobs:
				if !ok {
					d.spent = true
					re.endPace(d)
					return
				}
				d.batch = b
				continue
			default:
				re.arm(d, d.clk.now()+int64(jobPoll))
				return
			}
		}
		j := d.batch[0]
		if !d.gate(j) {
			return // the gate rings when it opens
		}
		if now := d.clk.now(); j.sched > now {
			re.arm(d, j.sched)
			return
		}
		d.batch[0] = nil
		d.batch = d.batch[1:]
		if !d.send(j) {
			re.endPace(d)
			return
		}
	}
}

// paceDue sends what is due, if anything is: the loop calls it between the
// streams it reads, so that a send waits for one stream's bytes at most
// rather than for a whole batch of events.
func (re *reactor) paceDue() {
	if d := re.disp; d != nil && len(d.batch) > 0 && d.batch[0].sched <= d.clk.now() {
		re.pace()
	}
}

// arm sets the timer to fire at due (on d.clk), unless it already will.
func (re *reactor) arm(d *dispatch, due int64) {
	if d.armed == due {
		return
	}
	d.armed = due
	rem := max(due-d.clk.now(), 1)
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(rem)}
	if err := unix.TimerfdSettime(re.tfd, 0, &spec, nil); err != nil {
		panic("load generator: timerfd_settime: " + err.Error()) // EBADF/EINVAL: a bug here
	}
}

func (re *reactor) endPace(d *dispatch) {
	re.disp = nil
	_ = unix.TimerfdSettime(re.tfd, 0, &unix.ItimerSpec{}, nil)
	close(d.done)
}
