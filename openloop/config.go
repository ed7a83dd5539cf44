package openloop

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/mbench/mbench/internal/userfile"
)

// Config is one open-loop run against one or more OpenAI-compatible servers.
type Config struct {
	Targets []string // base URLs, e.g. "http://127.0.0.1:8000"; requests round-robin over them
	Model   string   // "" = ask GET /v1/models of the first target once and take the first id
	// TokenIDs is the range prompt token ids are drawn from (see
	// ChooseTokens). Unset, it is DefaultTokenRange cut to the vocabulary
	// size; set, it is checked against it. See Result.TokenIDs.
	TokenIDs TokenRange
	// Vocab is the engine's vocabulary size when the caller knows it (0 =
	// unknown). A run that looks its model up (Model "") takes it from the
	// same GET /v1/models where the engine says it.
	Vocab int
	// Endpoint is the API driven: completions (the default when empty) or
	// chat (see EndpointChat). The metrics are defined alike for both.
	Endpoint Endpoint
	// Request is what every request carries beyond its prompt and length:
	// headers, an API key, sampling parameters, extra body fields, natural
	// output lengths (request.go). The zero value is fixed lengths and
	// the engine's sampling defaults.
	Request Request
	// Rate is the offered load in req/s. With Shape.Trace it is a rate
	// multiplier on top of Trace.TimeScale (0 = 1). A closed loop
	// (Arrival.Process concurrency) has none: 0.
	Rate    float64
	Arrival Arrival
	Shape   Shape
	Seed    int64 // workload seed: same seed ⇒ same schedule and prompts
	Warmup  int   // first requests of the schedule, recorded with phase "warmup"
	// IncludeRamp measures the requests sent during Arrival.Ramp (phase
	// measure, Record.Ramp set); by default they are phase "ramp", outside
	// the measured window.
	IncludeRamp bool
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
	// RequestTimeout bounds each request from its send to the end of its
	// stream; one that runs past it is recorded with ErrorClass timeout.
	// 0 means none.
	RequestTimeout time.Duration
	// RequestIDPrefix starts every request's X-Request-Id header (the id
	// vLLM logs the request under), followed by the request's ID; it is
	// recorded as Record.RequestID. "" means "mbench-", eight random hex
	// digits and "-", unique per run.
	RequestIDPrefix string
	// StreamMemory caps the memory that all requests in flight together may
	// hold in stream buffers grown for long lines (beyond 64 KiB each); a
	// request that would exceed it fails with ErrorClass stream_too_large.
	// 0 means DefaultStreamMemory (256 MiB).
	StreamMemory int64
	Cell         string
	Block        int
	Sink         io.Writer      // requests.jsonl, one Write per finished request (may be nil)
	Progress     func(Progress) // optional, called about 4 times a second and once at the end
	// Client is optional. Without it, plain-http targets are sent over a
	// built-in HTTP/1.1 client with keep-alive connections (half the CPU of
	// net/http per streamed request) and https targets over NewTransport;
	// either way the run closes its connections when it ends. No timeout
	// but RequestTimeout, no in-flight cap.
	Client *http.Client
	// OnPhase, when set, is called synchronously as the run enters a phase:
	// PhaseWarmup once the cache fill (if any) is done, before the first
	// open-loop request; PhaseMeasure just before the first measured request
	// is sent. A caller that snapshots engine counters there (the prefix
	// cache's /metrics) keeps fill and warmup out of its window. Sending
	// waits while it runs, so it must return quickly.
	OnPhase func(phase string)
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
	AbortCause             AbortCause // why it was aborted (when Aborted)
	ClientCPUPct           float64    // this process's CPU during the run, % of one core
	// HostBusyPct and HostStealPct are the whole machine's busy CPU and the
	// CPU its hypervisor stole during the run, % of all its cores (what the
	// load generator shared its cores with: the engine, when local, and any
	// other tenant); HostCPUKnown says the OS gave them.
	HostBusyPct, HostStealPct float64
	HostCPUKnown              bool
	StopReason                string      // min_completed, requests, duration, timeout, trace_end, aborted, canceled
	Model                     string      // the model requests named
	TokenIDs                  TokenRange  // the range prompt token ids were drawn from
	TokenSource               TokenSource // where TokenIDs came from
	Grade                     Grade       // the generator's self-grading over the measured requests
}

// Validate reports the first setting of c that cannot be run, as a
// FieldError whose path names the setting as the matrix does ("rate",
// "arrival.ramp.from", "shape.input"), so that a caller can name it in its
// own terms (mbench load names the flag); its message reads as the path
// (`shape "s": input: …`). Run calls it first.
func (c *Config) Validate() error {
	if len(c.Targets) == 0 {
		return fieldErr("targets", "", "need at least one base URL")
	}
	for _, t := range c.Targets {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fieldErr("targets", "", "%q is not an http(s) base URL", t)
		}
	}
	if err := c.Endpoint.Validate(); err != nil {
		return err
	}
	if err := c.Request.Validate(); err != nil {
		return err
	}
	if err := first(problems(c.Shape.Problems()).under("shape", fmt.Sprintf("shape %q", c.Shape.Name))); err != nil {
		return err
	}
	if err := c.Shape.checkFiles(); err != nil {
		return err
	}
	// Counts first: a negative one is that setting's error, not a missing
	// stop condition.
	for _, n := range []struct {
		path string
		v    int
	}{{"warmup", c.Warmup}, {"min_completed", c.MinCompleted}, {"requests", c.Requests}} {
		if n.v < 0 {
			return fieldErr(n.path, "0 or more", "must be ≥ 0, got %d", n.v)
		}
	}
	if c.Shape.Trace != nil {
		if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate > MaxRate {
			return fieldErr("rate", "", "the trace rate multiplier must be > 0 (or 0 for 1) and at most %g, got %v", float64(MaxRate), c.Rate)
		}
	} else {
		if c.Arrival.Process == ArrivalConcurrency && c.Rate != 0 {
			return fieldErr("rate", "arrival.in_flight", "a closed loop (concurrency) has no rate")
		}
		if !(c.Rate > 0) && c.Arrival.Process != ArrivalConcurrency {
			return fieldErr("rate", "", "must be > 0 req/s, got %v", c.Rate)
		}
		if err := CheckRate(c.Rate); err != nil {
			return fieldErr("rate", "", "%s; for every request at once give rate inf (a burst) with a number of requests", err.(*FieldError).Msg)
		}
		if c.MinCompleted <= 0 && c.Requests <= 0 && c.Duration <= 0 {
			return namedErr("requests", "stop condition", "", "set min_completed, requests or duration")
		}
		if math.IsInf(c.Rate, 1) && c.Requests <= 0 {
			return fieldErr("rate", "", "an infinite rate (a burst) sends every request at once: give the number of requests (requests), not min_completed or duration")
		}
	}
	if err := c.Arrival.Validate(); err != nil {
		return err
	}
	if err := c.Arrival.CheckShape(c.Shape); err != nil {
		return err
	}
	// The durations and abort_if's cap (only the sign is read).
	paths := []string{"duration", "timeout", "drain_timeout", "abort_if", "abort_if", "request_timeout"}
	for i, v := range []time.Duration{c.Duration, c.Timeout, c.DrainTimeout, c.AbortIf.MaxTTFT, time.Duration(c.AbortIf.MaxInflight), c.RequestTimeout} {
		if v < 0 {
			return namedErr(paths[i], "duration/timeout/drain_timeout/request_timeout/abort_if", "", "must be ≥ 0")
		}
	}
	if c.StreamMemory < 0 {
		return namedErr("stream_memory", "stream memory", "", "must be ≥ 0, got %d", c.StreamMemory)
	}
	if !c.TokenIDs.IsZero() {
		if err := c.TokenIDs.Validate(); err != nil {
			return err
		}
	}
	if !validHeaderValue(c.RequestIDPrefix) {
		return namedErr("request_id_prefix", fmt.Sprintf("request id prefix %q", c.RequestIDPrefix), "", "control characters cannot go in a header")
	}
	return nil
}

// Bounds shared by every way a run is described (a matrix, mbench load's
// flags): beyond them a run cannot be what was asked for on any machine, and
// trying costs the machine (an in-flight level allocates its state up front;
// a finite rate of 1e308 req/s opens connections until file descriptors run
// out).
const (
	MaxInFlight = 1 << 20 // requests in flight: concurrency, in_flight, max_in_flight
	MaxRate     = 1e6     // req/s offered at a finite rate; a trace's rate multiplier
)

// CheckRate refuses a finite rate above MaxRate (a *FieldError at "rate");
// an infinite one is a burst (every request at once), not bounded here.
func CheckRate(rate float64) error {
	if math.IsNaN(rate) || (rate > MaxRate && !math.IsInf(rate, 1)) {
		return fieldErr("rate", "", "%v req/s is more than one load generator offers (at most %g req/s)", rate, float64(MaxRate))
	}
	return nil
}

// checkFiles refuses, before any contact with the engine, a trace or
// dataset that is not a regular file within its size limit (one it cannot
// stat is reported where it is read, with the read's context).
func (s Shape) checkFiles() error {
	kind, path, limit := "trace", "", int64(MaxTraceFile)
	switch {
	case s.Trace != nil:
		path = s.Trace.Path
	case s.Dataset != nil: // not both: Validate refused that first
		kind, path, limit = "dataset", s.Dataset.Path, MaxDatasetFile
	}
	if fi, err := os.Stat(path); path != "" && err == nil {
		if err := userfile.Check(fi, kind+" file "+path, limit); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	return nil
}
