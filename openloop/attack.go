package openloop

import (
	"fmt"
	"runtime"
	"time"
)

// The attacker: the hot path of a run, in the order a request takes it.
// The dispatcher takes each prepared request at the send time the pacer
// gave it (pacer.go), waits until then with the waiter (wait.go) and
// launches it; the request runs on a goroutine of its own or as a
// coroutine of the reactor (reactor_linux.go, whose own dispatcher is
// reactor_dispatch_linux.go), is sent and streamed by one of the two
// clients behind client.do — the built-in HTTP/1.1 one (h1.go) or net/http
// (client.go) — and finishes here: counted, checked against the stop
// conditions and handed to the records' sink (sink.go, record.go). The
// closed loop's and a trace's dispatchers (closedloop.go, replay.go)
// launch and execute the same way.

// runOpen is the open-loop dispatcher: one goroutine that takes prepared
// requests in schedule order, waits for each one's send time with the
// waiter and launches it. A request whose time has passed is launched at
// once; its lateness shows as SentNs − ScheduledNs. Nothing waits for
// responses, so there is no cap on the requests in flight, unless
// Arrival.MaxInFlight sets one: then a request due while the cap is reached waits for a slot
// (in schedule order), and the wait is its QueuedNs, not lateness.
func (r *runner) runOpen() {
	sch, err := NewSchedule(r.cfg.Arrival, r.cfg.Rate, r.cfg.Seed)
	if err != nil { // validated before; keep the run honest anyway
		r.abort(AbortHarness, err.Error())
		return
	}
	jobs := make(chan []*job, 512/jobBatch)
	base := r.clk.now() + int64(openLead)
	go r.buildOpen(sch, base, jobs)
	var slots chan struct{}
	if n := r.cfg.Arrival.MaxInFlight; n > 0 {
		slots = make(chan struct{}, n)
	}
	if r.re != nil && r.mode == defaultWaitMode && slots == nil {
		if r.runOpenReactor(jobs) {
			r.stop(r.endReason)
		}
		return
	}
	capLate := false // the dispatcher is behind because of a wait for a slot
	w := newWaiter(&r.clk, r.stopCh, &r.stopped, r.mode)
	defer w.close()
	defer w.lockThread()()
	for batch := range jobs {
		for _, j := range batch {
			if !w.wait(j.sched) {
				return
			}
			var release func()
			if slots != nil {
				if !r.takeSlot(slots, j, &capLate) {
					return
				}
				release = func() { <-slots }
			}
			if j.phase == PhaseMeasure {
				r.enterMeasure()
			}
			r.launch(j, release)
			if r.overInflight() {
				return
			}
			// A waiter that parks (timerfd) frees this P for the new request's
			// goroutine by itself; the others keep the P, so yield it now.
			if w.mode != waitTimerfd {
				runtime.Gosched()
			}
		}
	}
	r.stop(r.endReason)
}

// takeSlot takes one of slots for j, waiting while all are in flight, and
// sets j.queued: the time past its send time that j waited because of the
// cap — its own wait for a slot, or the dispatcher's for an earlier
// request's that it has not caught up on (*capLate) — so that lag counts
// only the generator's own delay. False: the run stopped sending.
func (r *runner) takeSlot(slots chan struct{}, j *job, capLate *bool) bool {
	late := r.clk.now() > j.sched
	select {
	case slots <- struct{}{}:
		*capLate = *capLate && late
	default:
		select {
		case slots <- struct{}{}:
		case <-r.stopCh:
			return false
		}
		*capLate = true
	}
	if r.stopped.Load() {
		<-slots
		return false
	}
	if *capLate {
		j.queued = max(0, r.clk.now()-j.sched)
	}
	return true
}

// launch runs j in a goroutine of its own, or as a coroutine of the
// reactor. Over the raw client, a request that finds an idle connection is
// written from the calling (dispatcher) goroutine first, so that its send
// time does not wait for the scheduler.
func (r *runner) launch(j *job, after func()) {
	fn := r.launchFunc(j, after)
	if r.re != nil {
		r.re.submit(fn)
		return
	}
	go fn()
}

// launchFunc starts j (the target, the early write, the counters) and
// returns the rest of its work, to run on its own goroutine or coroutine.
func (r *runner) launchFunc(j *job, after func()) func() {
	j.target = r.pickTarget()
	if r.cl.raw && r.cl.beforeWrite == nil {
		j.preSent = r.cl.pools[j.target].preWrite(j, r.clk.now)
	}
	r.inflight.Add(1)
	r.sent.Add(1)
	r.wg.Add(1)
	return func() {
		defer r.wg.Done()
		r.execute(j)
		if after != nil {
			after()
		}
	}
}

// overInflight aborts the run, and reports true, when more than
// AbortIf.MaxInflight requests are in flight (the open loop's check after
// each send).
func (r *runner) overInflight() bool {
	m := int64(r.cfg.AbortIf.MaxInflight)
	if m > 0 && r.inflight.Load() > m {
		r.abort(AbortOverload, fmt.Sprintf("more than %d requests in flight", m))
		return true
	}
	return false
}

// executeWait is execute for a caller that waits for the record (a trace
// session): on the reactor when there is one.
func (r *runner) executeWait(j *job) *Record {
	if r.re == nil {
		return r.execute(j)
	}
	done := make(chan *Record, 1)
	r.re.submit(func() { done <- r.execute(j) })
	return <-done
}

// pickTarget is the next target, round-robin.
func (r *runner) pickTarget() int { return int((r.rr.Add(1) - 1) % uint64(len(r.bases))) }

// execute sends j, waits for its stream to end and records it.
func (r *runner) execute(j *job) *Record {
	rec := Record{ID: j.id, Cell: r.cfg.Cell, Block: r.cfg.Block, Phase: j.phase, ScheduledNs: j.sched,
		InputTokens: j.input, Session: j.session, Turn: j.turn, PrefixGroup: j.group, TraceNs: j.traceNs, RequestID: j.reqID, Ramp: j.ramp, MaxTokens: j.output,
		QueuedNs: j.queued}
	t := j.target
	if t < 0 {
		t = r.pickTarget()
	}
	rec.Target = r.shown[t]
	var onFirst func()
	var ttftTimer *time.Timer
	if d := r.cfg.AbortIf.MaxTTFT; d > 0 && j.phase != PhaseFill {
		ttftTimer = time.AfterFunc(d, func() { r.abort(AbortOverload, fmt.Sprintf("a request waited more than %v for its first token", d)) })
		onFirst = func() { ttftTimer.Stop() }
	}
	release := r.cl.do(r.reqCtx, t, j, &rec, onFirst)
	if ttftTimer != nil {
		ttftTimer.Stop()
	}
	r.inflight.Add(-1)
	r.finish(&rec)
	if release != nil {
		release()
	}
	return &rec
}

// finish counts a finished request, applies the stop conditions it can
// trigger and hands the record to the sink.
func (r *runner) finish(rec *Record) {
	if rec.Error != "" { // a transport's message may quote the URL it was given
		rec.Error = RedactUserinfo(rec.Error)
	}
	if rec.Phase == PhaseWarmup && r.warmLeft.Add(-1) == 0 {
		close(r.warmDone)
	}
	if rec.OK() {
		r.okAll.Add(1)
	} else {
		r.failed.Add(1)
	}
	if rec.Phase == PhaseMeasure {
		if rec.OK() {
			if n := r.measOK.Add(1); r.cfg.MinCompleted > 0 && n >= int64(r.cfg.MinCompleted) {
				r.stop("min_completed")
			}
		} else if f := r.measFailed.Add(1); r.cfg.MinCompleted > 0 && f > int64(r.cfg.MinCompleted) && !r.stopped.Load() {
			r.abort(AbortFailures, fmt.Sprintf("too many failures: %d measured requests failed, %d ok (last: %s)", f, r.measOK.Load(), rec.Error))
		}
	}
	r.sink.add(rec)
}
