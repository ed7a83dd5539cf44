package openloop

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// tracePlan is a trace prepared for replay: requests in send order with
// their scaled send times, grouped into sessions.
type tracePlan struct {
	items    []traceItem // by scaled send time; the index is the request ID
	sessions [][]int     // indices into items, each session in turn order; sessions by first send time
	maxSess  int
}

type traceItem struct {
	req   *TraceRequest
	sched int64 // ns after the trace's first request, scaled
}

// sessionLead is how long before a session's first send its goroutine starts
// (to build the prompt).
const sessionLead = 5 * time.Millisecond

// newTracePlan orders reqs by timestamp, keeps the first RequestLimit, scales
// time by TimeScale and the rate multiplier, and groups sessions. Within a
// session, turns go in turn order when every request has a turn, else in
// timestamp order.
func newTracePlan(reqs []TraceRequest, t Trace, mult float64) (*tracePlan, error) {
	if len(reqs) == 0 {
		return nil, errors.New("no requests")
	}
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return reqs[order[a]].TimestampMs < reqs[order[b]].TimestampMs })
	if t.RequestLimit > 0 && t.RequestLimit < len(order) {
		order = order[:t.RequestLimit]
	}
	scale, mult := cmp.Or(t.TimeScale, 1), cmp.Or(mult, 1)
	p := &tracePlan{items: make([]traceItem, len(order)), maxSess: t.MaxInflightSessions}
	ts0 := reqs[order[0]].TimestampMs
	bySession := map[string]int{}
	for i, oi := range order {
		tr := &reqs[oi]
		p.items[i] = traceItem{req: tr, sched: int64(math.Round((tr.TimestampMs - ts0) * 1e6 / scale / mult))}
		k := tr.sessionKey()
		si, ok := bySession[k]
		if !ok {
			si = len(p.sessions)
			bySession[k] = si
			p.sessions = append(p.sessions, nil)
		}
		p.sessions[si] = append(p.sessions[si], i)
	}
	for _, s := range p.sessions {
		if !slices.ContainsFunc(s, func(ix int) bool { return !p.items[ix].req.HasTurn }) { // every request has a turn
			sort.SliceStable(s, func(a, b int) bool { return p.items[s[a]].req.Turn < p.items[s[b]].req.Turn })
		}
	}
	sort.SliceStable(p.sessions, func(a, b int) bool {
		return p.items[p.sessions[a][0]].sched < p.items[p.sessions[b][0]].sched
	})
	return p, nil
}

// offered is the offered rate of the measured requests (IDs ≥ warmup), from
// their scaled trace times.
func (p *tracePlan) offered(warmup int) float64 {
	if len(p.items)-warmup < 2 {
		return 0
	}
	span := p.items[len(p.items)-1].sched - p.items[warmup].sched
	if span <= 0 {
		return math.Inf(1)
	}
	return float64(len(p.items)-warmup-1) / (float64(span) / 1e9)
}

// runTrace replays the plan. Sessions are admitted in order of their first
// send, at most maxSess at a time; each session sends its turns one after the
// other, turn k+1 at max(its trace time, completion of turn k). A request's
// ScheduledNs is that intended time (its TraceNs the trace's own), so waiting
// for an earlier turn or for a session slot (when every slot was taken) is
// not counted as send lag; nothing else moves a request's schedule off its
// trace time.
func (r *runner) runTrace(p *tracePlan) {
	base := r.clk.now() + int64(openLead)
	var slots chan struct{}
	if p.maxSess > 0 {
		slots = make(chan struct{}, p.maxSess)
	}
	var swg sync.WaitGroup
	w := newWaiter(&r.clk, r.stopCh, &r.stopped, r.mode)
	defer w.close()
launch:
	for _, s := range p.sessions {
		if !w.wait(base + p.items[s[0]].sched - int64(sessionLead)) {
			break
		}
		// A session that had to wait for a slot is scheduled no earlier
		// than it got one (a limit the trace asked for); otherwise its
		// first turn keeps its trace time, and any lateness of this loop
		// shows as send lag.
		var admitted int64
		if slots != nil {
			select {
			case slots <- struct{}{}:
			default:
				select {
				case slots <- struct{}{}:
					admitted = r.clk.now()
				case <-r.stopCh:
					break launch
				}
			}
		}
		// Sessions count in r.wg too, so the drain (and its timeout) covers
		// a session between turns as well as its request in flight.
		swg.Add(1)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer swg.Done()
			if slots != nil {
				defer func() { <-slots }()
			}
			r.runSession(p, s, base, admitted)
		}()
	}
	done := make(chan struct{})
	go func() { swg.Wait(); close(done) }()
	select {
	case <-done:
		r.stop("trace_end")
	case <-r.stopCh:
	}
}

// runSession sends one session's turns in order.
func (r *runner) runSession(p *tracePlan, s []int, base, admitted int64) {
	w := newWaiter(&r.clk, r.stopCh, &r.stopped, r.mode)
	defer w.close()
	var toks []int32
	var body []byte
	prevDone := admitted
	for k, ix := range s {
		it := &p.items[ix]
		phase := PhaseWarmup
		if ix >= r.cfg.Warmup {
			phase = PhaseMeasure
			if r.cfg.Duration > 0 && it.sched-p.items[min(r.cfg.Warmup, len(p.items)-1)].sched >= int64(r.cfg.Duration) {
				r.stop("duration")
				return
			}
		}
		toks = r.gen.trace(ix, it.req, toks)
		traceNs := base + it.sched
		j := r.prepare(&job{id: ix, phase: phase, sched: max(traceNs, prevDone), traceNs: traceNs,
			output: it.req.OutputLength, session: it.req.SessionID, turn: k + 1}, toks, &body)
		if !w.wait(j.sched) {
			return
		}
		if phase == PhaseMeasure {
			if n := r.measSent.Add(1); r.cfg.Requests > 0 && n > int64(r.cfg.Requests) {
				r.stop("requests")
				return
			}
			r.enterMeasure()
		}
		if m := int64(r.cfg.AbortIf.MaxInflight); m > 0 && r.inflight.Load() >= m {
			r.abort(AbortOverload, fmt.Sprintf("more than %d requests in flight", m))
			return
		}
		r.inflight.Add(1)
		r.sent.Add(1)
		rec := r.executeWait(j)
		prevDone = rec.DoneNs
	}
}
