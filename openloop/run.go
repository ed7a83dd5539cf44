package openloop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config is one open-loop run against one or more OpenAI-compatible servers.
type Config struct {
	Targets []string // base URLs, e.g. "http://127.0.0.1:8000"; requests round-robin over them
	Model   string   // "" = ask GET /v1/models of the first target once and take the first id
	// Rate is the offered load in req/s. With Shape.Trace it is a rate
	// multiplier on top of Trace.TimeScale (0 = 1).
	Rate    float64
	Arrival Arrival
	Shape   Shape
	Seed    int64 // workload seed: same seed ⇒ same schedule and prompts
	Warmup  int   // first requests of the schedule, recorded with phase "warmup"
	// Stop conditions of the measured phase; the first one reached stops
	// sending (a trace also stops at its end). At least one is required
	// unless the shape is a trace.
	MinCompleted int           // measured requests completed OK
	Requests     int           // measured requests sent
	Duration     time.Duration // measured send window, on the schedule's clock
	Timeout      time.Duration // wall-clock cap from the start of the open-loop phases
	// DrainTimeout bounds the wait for in-flight requests after sending
	// stops; those still running are recorded as errors "drain timeout".
	// 0 means 60 s.
	DrainTimeout time.Duration
	AbortIf      AbortIf
	Cell         string
	Block        int
	Sink         io.Writer      // requests.jsonl, one Write per finished request (may be nil)
	Progress     func(Progress) // optional, called about 4 times a second and once at the end
	Client       *http.Client   // optional; default: NewTransport, no timeout, no in-flight cap
}

// AbortIf stops a run early when the server is saturated. The run's Result
// is then Aborted, and requests still in flight are cancelled and recorded as
// errors "aborted: <reason>".
type AbortIf struct {
	MaxInflight int           // more requests in flight than this (0 = off)
	MaxTTFT     time.Duration // a request waited longer than this for its first token (0 = off)
}

// Progress is a snapshot of a running run.
type Progress struct {
	Phase      string // fill, warmup, measure, drain, done
	Sent       int    // requests sent, all phases
	Completed  int    // finished OK, all phases
	Failed     int    // finished with an error, all phases
	Inflight   int
	MeasuredOK int // measured requests finished OK
	Elapsed    time.Duration
}

// Result is the outcome of Run.
type Result struct {
	Records []Record  // every request, sorted by ID
	Start   time.Time // wall clock of the run's t=0 (all *Ns are relative to it)
	// WindowStart and WindowEnd bound the measured window: first measured
	// send to last measured completion (which, in an aborted run, is the
	// abort). Zero when nothing was measured.
	WindowStart, WindowEnd time.Time
	Offered                float64 // offered rate of the measured phase, req/s
	Aborted                bool
	AbortReason            string
	ClientCPUPct           float64 // this process's CPU during the run, % of one core
	StopReason             string  // min_completed, requests, duration, timeout, trace_end, aborted, canceled
	Model                  string  // the model requests named
	Grade                  Grade   // the generator's self-grading over the measured requests
}

// Defaults.
const (
	defaultDrainTimeout = 60 * time.Second
	openLead            = 20 * time.Millisecond // schedule starts this long after the open-loop phase begins
	fillConcurrency     = 8
	progressEvery       = 250 * time.Millisecond
)

// runner is the state of one Run.
type runner struct {
	cfg   Config
	clk   clock
	cl    client
	urls  []string // completion URLs, per target
	bases []string // base URLs, per target
	model string
	gen   promptGen
	mode  int // pacer mode

	stopCh    chan struct{}
	stopped   atomic.Bool
	stopOnce  sync.Once
	mu        sync.Mutex
	reason    string // why sending stopped
	aborted   bool
	abortWhy  string
	endReason string // set by a job source before it closes its channel

	reqCtx     context.Context
	cancelReqs context.CancelCauseFunc

	wg                            sync.WaitGroup
	inflight, sent, okAll, failed atomic.Int64
	measOK, measFailed, measSent  atomic.Int64
	rr                            atomic.Uint64
	phase                         atomic.Value // string
	fillCount                     int

	sinkCh   chan Record
	records  []Record
	sinkDone chan struct{}
}

// Run performs one run: cache fill (if the shape asks for it), then warmup and
// measurement open-loop, then a drain of the requests in flight. Records are
// streamed to cfg.Sink as requests finish and returned in the Result. When ctx
// is cancelled, in-flight requests are cancelled and Run returns the partial
// Result with ctx's error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("openloop: config: %w", err)
	}
	r := &runner{cfg: cfg, mode: defaultWaitMode, stopCh: make(chan struct{}), sinkCh: make(chan Record, 8192), sinkDone: make(chan struct{})}
	return r.run(ctx)
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	cfg := &r.cfg
	hc := cfg.Client
	if hc == nil {
		hc = &http.Client{Transport: NewTransport()}
	}
	for _, t := range cfg.Targets {
		b := strings.TrimRight(t, "/")
		r.bases = append(r.bases, b)
		r.urls = append(r.urls, b+"/v1/completions")
	}
	r.model = cfg.Model
	if r.model == "" {
		m, err := fetchModel(ctx, hc, r.bases[0])
		if err != nil {
			return nil, fmt.Errorf("openloop: %w", err)
		}
		r.model = m
	}
	var plan *tracePlan
	if tr := cfg.Shape.Trace; tr != nil {
		reqs, err := LoadTrace(tr.Path)
		if err != nil {
			return nil, fmt.Errorf("openloop: %w", err)
		}
		if plan, err = newTracePlan(reqs, *tr, cfg.Rate); err != nil {
			return nil, fmt.Errorf("openloop: trace %s: %w", tr.Path, err)
		}
	}
	r.gen = promptGen{seed: cfg.Seed, shape: cfg.Shape}
	cpu0, cpuErr := cpuSeconds()
	r.clk = clock{start: time.Now()}
	r.cl = client{hc: hc, clk: &r.clk}
	var cancel context.CancelCauseFunc
	r.reqCtx, cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	r.cancelReqs = cancel
	defer cancel(causeCanceled)
	unwatch := context.AfterFunc(ctx, func() {
		r.stop("canceled")
		r.cancelReqs(causeCanceled)
	})
	defer unwatch()
	go r.sinkLoop()
	progDone := make(chan struct{})
	progStopped := r.startProgress(progDone)

	r.setPhase(PhaseFill)
	r.runFill()
	if !r.stopped.Load() {
		r.setPhase(PhaseWarmup)
		if cfg.Timeout > 0 {
			t := time.AfterFunc(cfg.Timeout, func() { r.stop("timeout") })
			defer t.Stop()
		}
		if plan != nil {
			r.runTrace(plan)
		} else {
			r.runOpen()
		}
	}
	r.setPhase("drain")
	r.drain()
	close(r.sinkCh)
	<-r.sinkDone
	r.setPhase("done")
	close(progDone)
	<-progStopped

	res := r.result(plan)
	if cpuErr == nil {
		if cpu1, err := cpuSeconds(); err == nil {
			if wall := time.Since(r.clk.start).Seconds(); wall > 0 {
				res.ClientCPUPct = 100 * (cpu1 - cpu0) / wall
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

func (c *Config) validate() error {
	if len(c.Targets) == 0 {
		return errors.New("targets: need at least one base URL")
	}
	for _, t := range c.Targets {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("targets: %q is not an http(s) base URL", t)
		}
	}
	if err := c.Shape.Validate(); err != nil {
		return fmt.Errorf("shape %q: %w", c.Shape.Name, err)
	}
	if c.Shape.Trace != nil {
		if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
			return fmt.Errorf("rate: the trace rate multiplier must be > 0 (or 0 for 1), got %v", c.Rate)
		}
	} else {
		if !(c.Rate > 0) {
			return fmt.Errorf("rate: must be > 0 req/s, got %v", c.Rate)
		}
		if c.MinCompleted <= 0 && c.Requests <= 0 && c.Duration <= 0 {
			return errors.New("stop condition: set min_completed, requests or duration")
		}
	}
	if err := c.Arrival.Validate(); err != nil {
		return err
	}
	if c.Warmup < 0 || c.MinCompleted < 0 || c.Requests < 0 {
		return fmt.Errorf("warmup/min_completed/requests: must be ≥ 0, got %d/%d/%d", c.Warmup, c.MinCompleted, c.Requests)
	}
	if c.Duration < 0 || c.Timeout < 0 || c.DrainTimeout < 0 || c.AbortIf.MaxTTFT < 0 || c.AbortIf.MaxInflight < 0 {
		return errors.New("duration/timeout/drain_timeout/abort_if: must be ≥ 0")
	}
	return nil
}

// stop ends sending; the first reason given wins.
func (r *runner) stop(reason string) {
	r.stopOnce.Do(func() {
		r.mu.Lock()
		r.reason = reason
		r.mu.Unlock()
		r.stopped.Store(true)
		close(r.stopCh)
	})
}

// abort stops sending and cancels every request in flight.
func (r *runner) abort(why string) {
	r.mu.Lock()
	first := !r.aborted
	if first {
		r.aborted, r.abortWhy = true, why
	}
	r.mu.Unlock()
	if first {
		r.stop("aborted")
		r.cancelReqs(&stopCause{"aborted: " + why})
	}
}

func (r *runner) setPhase(p string) { r.phase.Store(p) }

// launch runs j in a goroutine of its own.
func (r *runner) launch(j *job, after func()) {
	r.inflight.Add(1)
	r.sent.Add(1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.execute(j)
		if after != nil {
			after()
		}
	}()
}

// execute sends j, waits for its stream to end and records it.
func (r *runner) execute(j *job) *Record {
	rec := Record{ID: j.id, Cell: r.cfg.Cell, Block: r.cfg.Block, Phase: j.phase, ScheduledNs: j.sched,
		InputTokens: j.input, Session: j.session, Turn: j.turn, PrefixGroup: j.group, TraceNs: j.traceNs}
	t := int((r.rr.Add(1) - 1) % uint64(len(r.urls)))
	rec.Target = r.bases[t]
	var onFirst func()
	var ttftTimer *time.Timer
	if d := r.cfg.AbortIf.MaxTTFT; d > 0 && j.phase != PhaseFill {
		ttftTimer = time.AfterFunc(d, func() { r.abort(fmt.Sprintf("a request waited more than %v for its first token", d)) })
		onFirst = func() { ttftTimer.Stop() }
	}
	r.cl.do(r.reqCtx, r.urls[t], j, &rec, onFirst)
	if ttftTimer != nil {
		ttftTimer.Stop()
	}
	r.inflight.Add(-1)
	r.finish(&rec)
	return &rec
}

// finish counts a finished request, applies the stop conditions it can
// trigger and hands the record to the sink.
func (r *runner) finish(rec *Record) {
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
			r.abort(fmt.Sprintf("too many failures: %d measured requests failed, %d ok (last: %s)", f, r.measOK.Load(), rec.Error))
		}
	}
	r.sinkCh <- *rec
}

// sinkLoop collects records and streams them to the sink, one Write per
// line. It is the only writer, so no lock is held around the Write.
func (r *runner) sinkLoop() {
	defer close(r.sinkDone)
	buf := make([]byte, 0, 4096)
	var sinkErr error
	for rec := range r.sinkCh {
		r.records = append(r.records, rec)
		if r.cfg.Sink == nil || sinkErr != nil {
			continue
		}
		buf = append(rec.AppendJSON(buf[:0]), '\n')
		if _, err := r.cfg.Sink.Write(buf); err != nil {
			sinkErr = err
			r.abort("writing requests.jsonl: " + err.Error())
		}
	}
}

// drain waits for the requests in flight, up to the drain timeout.
func (r *runner) drain() {
	r.stop("drained")
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	d := r.cfg.DrainTimeout
	if d <= 0 {
		d = defaultDrainTimeout
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.cancelReqs(causeDrain)
		<-done
	}
}

// startProgress calls cfg.Progress until done is closed; the returned channel
// is closed after the final call.
func (r *runner) startProgress(done <-chan struct{}) <-chan struct{} {
	stopped := make(chan struct{})
	if r.cfg.Progress == nil {
		close(stopped)
		return stopped
	}
	go func() {
		defer close(stopped)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				r.cfg.Progress(r.progress())
			case <-done:
				r.cfg.Progress(r.progress())
				return
			}
		}
	}()
	return stopped
}

func (r *runner) progress() Progress {
	p, _ := r.phase.Load().(string)
	return Progress{Phase: p, Sent: int(r.sent.Load()), Completed: int(r.okAll.Load()), Failed: int(r.failed.Load()),
		Inflight: int(r.inflight.Load()), MeasuredOK: int(r.measOK.Load()), Elapsed: time.Since(r.clk.start)}
}

// result assembles the Result from the collected records.
func (r *runner) result(plan *tracePlan) *Result {
	sort.Slice(r.records, func(i, j int) bool { return r.records[i].ID < r.records[j].ID })
	res := &Result{Records: r.records, Start: r.clk.start, Model: r.model}
	r.mu.Lock()
	res.Aborted, res.AbortReason, res.StopReason = r.aborted, r.abortWhy, r.reason
	r.mu.Unlock()
	var first, last int64 = math.MaxInt64, 0
	for i := range r.records {
		rec := &r.records[i]
		if rec.Phase != PhaseMeasure || rec.SentNs == 0 {
			continue
		}
		first = min(first, rec.SentNs)
		last = max(last, rec.DoneNs)
	}
	if last > 0 {
		res.WindowStart = r.clk.start.Add(time.Duration(first))
		res.WindowEnd = r.clk.start.Add(time.Duration(last))
	}
	res.Offered = r.cfg.Rate
	gradeRate := res.Offered
	if plan != nil {
		res.Offered = plan.offered(r.cfg.Warmup)
		gradeRate = 0 // a trace's gaps follow no parametric law: no KS test
	}
	res.Grade = SelfGrade(res.Records, gradeRate, r.cfg.Arrival)
	return res
}
