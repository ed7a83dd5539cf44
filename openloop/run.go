package openloop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults.
const (
	defaultDrainTimeout = 60 * time.Second
	openLead            = 20 * time.Millisecond // schedule starts this long after the open-loop phase begins
	fillConcurrency     = 8
	progressEvery       = 250 * time.Millisecond
)

// runner is the state of one Run.
type runner struct {
	cfg         Config
	clk         clock
	cl          *client
	bases       []string // base URLs, per target
	shown       []string // bases as records and messages name them: credentials redacted
	model       string
	tokens      TokenRange  // prompt token ids (first contact)
	tokenSource TokenSource // where tokens came from
	reqPrefix   string      // of X-Request-Id
	// headers are Config.Request's extra headers (the API key as
	// Authorization); headerWire the same as raw header lines, each
	// "\r\nName: value"; tail the end of every body. Encoded once.
	headers    [][2]string
	headerWire []byte
	tail       bodyTail

	beforeWrite func() // tests: see client.beforeWrite
	// re runs the raw client's requests as coroutines over one epoll set
	// (Linux); nil: a goroutine per request. noReactor (tests, benchmarks)
	// keeps it nil.
	re        *reactor
	noReactor bool
	eachWake  bool // benchmarks: the reactor wakes for every event (no coalescing)
	gen       promptGen
	mode      int // the waiter's mode

	stopCh     chan struct{}
	stopped    atomic.Bool
	stopOnce   sync.Once
	mu         sync.Mutex
	reason     string // why sending stopped
	aborted    bool
	abortWhy   string
	abortCause AbortCause
	endReason  string // set by a job source before it closes its channel

	reqCtx     context.Context
	cancelReqs context.CancelCauseFunc

	wg                            sync.WaitGroup
	inflight, sent, okAll, failed atomic.Int64
	measOK, measFailed, measSent  atomic.Int64
	rr                            atomic.Uint64
	phase                         atomic.Value // string
	measureOnce                   sync.Once
	// warmLeft counts the warm-up requests not yet finished; warmDone is
	// closed when the last one has (see buildOpen).
	warmLeft  atomic.Int64
	warmDone  chan struct{}
	fillCount int

	sink    *recordSink
	records []Record // the sink's, once it has closed
}

// newRunner is a runner for cfg (validated) that paces sends with mode.
func newRunner(cfg Config, mode int) *runner {
	r := &runner{cfg: cfg, mode: mode, stopCh: make(chan struct{}), warmDone: make(chan struct{})}
	r.warmLeft.Store(int64(cfg.Warmup))
	return r
}

// ErrModelLookup marks a run that could not start because the first target
// did not name its model (GET /v1/models failed): the endpoint is down or
// is not an OpenAI-compatible server.
var ErrModelLookup = errors.New("the endpoint did not list its model")

// Run performs one run: cache fill (if the shape asks for it), then warmup and
// measurement open-loop, then a drain of the requests in flight. Records are
// streamed to cfg.Sink as requests finish and returned in the Result. When ctx
// is cancelled, in-flight requests are cancelled and Run returns the partial
// Result with ctx's error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("openloop: config: %w", err)
	}
	return newRunner(cfg, defaultWaitMode).run(ctx)
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	cfg := &r.cfg
	hc, closeConns := r.connect()
	defer closeConns() // after the requests (drain waits for them)
	r.encodeRequests()
	if err := r.firstContact(ctx, hc); err != nil {
		return nil, err
	}
	plan, err := r.loadWorkload()
	if err != nil {
		return nil, err
	}
	cpu0, cpuErr := cpuSeconds()
	host0 := readHostTimes()
	r.clk = clock{start: time.Now()}
	var cancel context.CancelCauseFunc
	r.reqCtx, cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	r.cancelReqs = cancel
	defer cancel(causeCanceled)
	unwatch := context.AfterFunc(ctx, func() {
		r.stop("canceled")
		r.cancelReqs(causeCanceled)
	})
	defer unwatch()
	r.setPhase(PhaseWarmup)
	r.sink = newRecordSink(cfg.Sink, r.expectedRecords(), func(err error) {
		r.abort(AbortHarness, "writing requests.jsonl: "+err.Error())
	})
	progDone := make(chan struct{})
	progStopped := r.startProgress(progDone)

	if timeout := r.send(plan); timeout != nil {
		defer timeout.Stop()
	}
	r.setPhase("drain")
	r.drain()
	r.records = r.sink.close()
	r.setPhase("done")
	close(progDone)
	<-progStopped

	res := r.result(plan)
	res.HostBusyPct, res.HostStealPct, res.HostCPUKnown = hostShare(host0, readHostTimes(), time.Since(r.clk.start).Seconds())
	if cpuErr == nil {
		if cpu1, err := cpuSeconds(); err == nil {
			if wall := time.Since(r.clk.start).Seconds(); wall > 0 {
				res.ClientCPUPct = 100 * (cpu1 - cpu0) / wall
			}
		}
	}
	return res, ctx.Err()
}

// connect makes the run's client for its targets: the built-in HTTP/1.1
// client, on the reactor where it can run, for plain-http targets; net/http
// (hc, also the model lookup's) otherwise. closeConns closes them all.
func (r *runner) connect() (hc *http.Client, closeConns func()) {
	cfg := &r.cfg
	var urls []string
	for _, t := range cfg.Targets {
		b := strings.TrimRight(t, "/")
		r.bases = append(r.bases, b)
		r.shown = append(r.shown, RedactUserinfo(b))
		urls = append(urls, b+cfg.Endpoint.Path())
	}
	cl := newClient(cfg.Client, urls, &r.clk, cfg.RequestTimeout, &memBudget{limit: cmp.Or(cfg.StreamMemory, DefaultStreamMemory)})
	cl.beforeWrite = r.beforeWrite
	hc = cfg.Client
	if hc == nil { // https targets, and the model lookup
		hc = &http.Client{Transport: NewTransport()}
		if !cl.raw {
			cl.hc = hc
		}
	}
	r.cl = cl
	// The reactor's thread blocks in epoll_wait holding a P until sysmon
	// takes it back; with one P the other goroutines (the builder, the
	// sink, cancellations) would wait for that, so it needs two.
	if aps, ok := cl.reactorAddrs(); ok && !r.noReactor && runtime.GOMAXPROCS(0) >= 2 {
		if re, err := newReactor(); err == nil {
			re.eachWake = r.eachWake
			cl.useReactor(re, aps)
			r.re = re
		}
	}
	return hc, func() {
		if r.re != nil {
			r.re.close()
		}
		cl.close()
		hc.CloseIdleConnections()
	}
}

// encodeRequests encodes once what every request carries: the request id
// prefix, the extra headers (raw too) and the end of the body.
func (r *runner) encodeRequests() {
	cfg := &r.cfg
	r.reqPrefix = cfg.RequestIDPrefix
	if r.reqPrefix == "" {
		r.reqPrefix = newRequestIDPrefix()
	}
	r.headers, r.tail = cfg.Request.header(), newBodyTail(&cfg.Request)
	r.headerWire = nil
	for _, h := range r.headers {
		r.headerWire = append(append(append(append(r.headerWire, "\r\n"...), h[0]...), ": "...), h[1]...)
	}
}

// firstContact learns, when the model is not configured, the served
// model's id and, where the engine says it, its vocabulary size, which the
// prompt token ids must fit; then chooses the token ids.
func (r *runner) firstContact(ctx context.Context, hc *http.Client) error {
	cfg := &r.cfg
	r.model = cfg.Model
	vocab := cfg.Vocab
	if r.model == "" {
		served, err := FetchServedModel(ctx, hc, r.bases[0], r.headers)
		if err != nil {
			return fmt.Errorf("openloop: %w: %w", ErrModelLookup, err)
		}
		r.model, vocab = served.ID, cmp.Or(vocab, served.Vocab)
	}
	var err error
	r.tokens, r.tokenSource, err = ChooseTokens(cfg.TokenIDs, vocab, "the model "+r.model+" at "+r.shown[0])
	if err != nil {
		return fmt.Errorf("openloop: %w", err)
	}
	return nil
}

// loadWorkload reads the shape's files: a trace's replay plan (nil
// without one), a dataset's prompts into the prompt generator.
func (r *runner) loadWorkload() (*tracePlan, error) {
	cfg := &r.cfg
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
	r.gen = promptGen{seed: cfg.Seed, shape: cfg.Shape, tokens: r.tokens}
	if d := cfg.Shape.Dataset; d != nil {
		var err error
		if r.gen.items, err = LoadDataset(*d, cfg.Shape.Output); err != nil {
			return nil, fmt.Errorf("openloop: %w", err)
		}
	}
	return plan, nil
}

// send runs the phases that send: the cache fill, then warmup and
// measurement as the arrival says (a trace's plan, the closed loop, or the
// open loop's schedule). It returns the Timeout's timer (nil: none), which
// the caller stops once the run is over.
func (r *runner) send(plan *tracePlan) *time.Timer {
	cfg := &r.cfg
	r.runFill()
	if r.stopped.Load() {
		return nil
	}
	r.setPhase(PhaseWarmup)
	if cfg.OnPhase != nil {
		cfg.OnPhase(PhaseWarmup)
	}
	var t *time.Timer
	if cfg.Timeout > 0 {
		t = time.AfterFunc(cfg.Timeout, func() { r.stop("timeout") })
	}
	switch {
	case plan != nil:
		r.runTrace(plan)
	case cfg.Arrival.Process == ArrivalConcurrency:
		r.runClosed()
	default:
		r.runOpen()
	}
	return t
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
func (r *runner) abort(cause AbortCause, why string) {
	r.mu.Lock()
	first := !r.aborted
	if first {
		r.aborted, r.abortWhy, r.abortCause = true, why, cause
	}
	r.mu.Unlock()
	if first {
		r.stop("aborted")
		r.cancelReqs(&stopCause{"aborted: " + why})
	}
}

func (r *runner) setPhase(p string) { r.phase.Store(p) }

// enterMeasure marks the start of the measured phase, once; callers racing
// it wait until Config.OnPhase has returned.
func (r *runner) enterMeasure() {
	r.measureOnce.Do(func() {
		r.setPhase(PhaseMeasure)
		if r.cfg.OnPhase != nil {
			r.cfg.OnPhase(PhaseMeasure)
		}
	})
}

// expectedRecords estimates the records of the run, so that collecting them
// does not copy them over and over as the slice grows (at most 1<<16 ahead).
func (r *runner) expectedRecords() int {
	c := &r.cfg
	n := cmp.Or(float64(c.Requests), c.Rate*c.Duration.Seconds()) // both validated finite and ≥ 0
	return min(int(min(n, 1<<16))+c.Warmup+64, 1<<16)
}

// drain waits for the requests in flight, up to the drain timeout.
func (r *runner) drain() {
	r.stop("drained")
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	t := time.NewTimer(cmp.Or(r.cfg.DrainTimeout, defaultDrainTimeout)) // validated ≥ 0
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
	res := &Result{Records: r.records, Start: r.clk.start, Model: r.model, TokenIDs: r.tokens, TokenSource: r.tokenSource}
	r.mu.Lock()
	res.Aborted, res.AbortReason, res.AbortCause, res.StopReason = r.aborted, r.abortWhy, r.abortCause, r.reason
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
	switch {
	case math.IsInf(r.cfg.Rate, 1):
		res.Offered = 0 // a burst: every request at once, no rate to offer
	case plan != nil:
		res.Offered = plan.offered(r.cfg.Warmup)
		gradeRate = 0 // a trace's gaps follow no parametric law: no KS test
	case r.cfg.Arrival.Process == ArrivalConcurrency:
		res.Offered = closedRate(r.records)
		gradeRate = 0 // sends follow completions: no law to test
	}
	res.Grade = SelfGrade(res.Records, gradeRate, r.cfg.Arrival)
	return res
}
