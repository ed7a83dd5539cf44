package simengine

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Engine is one simulated engine: a step loop and its HTTP surface.
type Engine struct {
	cfg     Config
	cost    *costModel
	created time.Time
	stderr  io.Writer

	mu     sync.Mutex // guards sch, closed, serial
	sch    *scheduler
	closed bool
	serial uint64

	wake       chan struct{}
	stop       chan struct{}
	loopDone   chan struct{}
	crashed    chan struct{} // closed by an injected crash
	crashSteps int64         // steps before the crash, under mu
	startOnce  sync.Once
	stopOnce   sync.Once
	logOnce    sync.Once
	log        *stepLog  // nil without a step log
	moon       *mooncake // a MooncakeConnector (KVConnector), else nil

	lateResets atomic.Int64 // steps that started more than maxLag behind the timeline
	faultSeq   atomic.Int64 // completion requests counted for Config.FaultEvery
}

// New validates cfg, applies its defaults and opens the step log. The step
// loop starts with Serve or the first request.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim config: %w", err)
	}
	cfg = cfg.withDefaults()
	e := &Engine{
		cfg:      cfg,
		cost:     newCostModel(cfg),
		created:  time.Now(),
		stderr:   os.Stderr,
		sch:      newScheduler(cfg),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
		crashed:  make(chan struct{}),
	}
	if cfg.KVConnector == KVConnectorMooncake {
		e.moon = &mooncake{e: e, engineID: randomID(), timeout: cfg.MooncakeAbortTimeout,
			client:  &http.Client{Timeout: 10 * time.Second},
			workers: map[int]*bootstrapDP{}, sends: map[string]*sendMeta{}, remotes: map[string]string{}}
		e.sch.kvDone = func(s *seq, capped bool) bool { return e.moon.finished(s.xferKey, s, capped) }
	}
	if cfg.StepLog != "" {
		l, err := openStepLog(cfg.StepLog)
		if err != nil {
			return nil, err
		}
		e.log = l
	}
	return e, nil
}

// BootstrapAddr is the host:port of a MooncakeConnector producer's
// bootstrap server once Serve listens there, else "".
func (e *Engine) BootstrapAddr() string {
	if e.moon == nil {
		return ""
	}
	e.moon.mu.Lock()
	defer e.moon.mu.Unlock()
	return e.moon.addr
}

// LaunchFactor is this launch's multiplicative noise factor on step time
// (1 when Noise is 0).
func (e *Engine) LaunchFactor() float64 { return e.cost.launchFactor }

func (e *Engine) start() { e.startOnce.Do(func() { go e.loop() }) }

// Close stops the step loop, fails requests still in flight and flushes and
// closes the step log. It is safe to call more than once.
func (e *Engine) Close() error {
	e.stopOnce.Do(func() { close(e.stop) })
	e.startOnce.Do(func() { close(e.loopDone) }) // never started: nothing to wait for
	<-e.loopDone
	e.mu.Lock()
	e.closed = true
	e.failAllLocked(errShutdown)
	e.mu.Unlock()
	e.closeLog()
	if e.log != nil && e.log.err != nil {
		return e.log.err
	}
	return nil
}

// Serve serves the engine's HTTP surface on ln until ctx is done, then shuts
// down within about a second: in-flight requests are ended, the step log is
// flushed, the listener closed. It returns nil after a shutdown asked for by
// ctx. Serve may be called once per Engine.
func (e *Engine) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: e.Handler(), ReadHeaderTimeout: 10 * time.Second}
	if e.moon != nil && e.moon.producer() {
		bln, err := net.Listen("tcp", e.cfg.BootstrapAddr)
		if err != nil {
			cerr := e.Close()
			return errors.Join(fmt.Errorf("sim: MooncakeConnector bootstrap server on %s: %w", e.cfg.BootstrapAddr, err), cerr)
		}
		bctx, bcancel := context.WithCancel(context.WithoutCancel(ctx))
		defer bcancel()
		e.moon.serveBootstrap(bctx, bln)
	}
	e.start()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		cerr := e.Close()
		return errors.Join(fmt.Errorf("sim: serve on %s: %w", ln.Addr(), err), cerr)
	case <-e.crashed:
		cerr := e.Close() // the streams in flight end with the crash's error
		sctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		_ = srv.Shutdown(sctx)
		cancel()
		e.mu.Lock()
		steps := e.crashSteps
		e.mu.Unlock()
		return errors.Join(&CrashError{Steps: steps}, cerr)
	case <-ctx.Done():
	}
	cerr := e.Close() // ends streams, so Shutdown does not wait on them
	sctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	<-errc
	return cerr
}

// ListenAndServe runs a simulated engine on cfg.Addr until ctx is done,
// announcing on stdout that it is simulated.
func ListenAndServe(ctx context.Context, cfg Config, stdout io.Writer) error {
	e, err := New(cfg)
	if err != nil {
		return err
	}
	addr := e.cfg.Addr
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = e.Close()
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("sim: cannot listen on %s: the address is already in use (another engine or process listens there; pick a free port with --addr): %w", addr, err)
		}
		return fmt.Errorf("sim: cannot listen on %s: %w", addr, err)
	}
	stepLog := cmp.Or(e.cfg.StepLog, "none")
	fmt.Fprintf(stdout, "%s: serving model %q on http://%s (pid %d, connector %s, async %t, launch factor %.4f, step log %s)\n",
		Banner, e.cfg.Model, ln.Addr(), os.Getpid(), e.cfg.Connector, e.cfg.Async, e.LaunchFactor(), stepLog)
	fmt.Fprintf(stdout, "sim: model %s\n", e.cfg.describe())
	if e.moon != nil && e.moon.producer() {
		fmt.Fprintf(stdout, "sim: MooncakeConnector bootstrap server on http://%s (engine_id %s)\n", e.cfg.BootstrapAddr, e.moon.engineID)
	}
	return e.Serve(ctx, ln)
}

// Handler returns the engine's HTTP surface. Using it without Serve is fine:
// the step loop starts with the first request; call Close when done.
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", e.handleHealth)
	mux.HandleFunc("/v1/models", e.handleModels)
	mux.HandleFunc("/version", e.handleVersion)
	mux.HandleFunc("/metrics", e.handleMetrics)
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		e.serveGeneration(w, r, decodeCompletionRequest, false)
	})
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		e.serveGeneration(w, r, decodeChatRequest, true)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Mbench-Simulated", "true")
		if !e.authorized(r) {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// authorized is vLLM's AuthenticationMiddleware
// (vllm/entrypoints/openai/server_utils.py:38-83 at vLLM commit b36adfa3,
// in 0.18.1): with
// an API key, a request to a /v1 path other than OPTIONS needs
// "Authorization: Bearer <key>" (the scheme case-insensitive); every other
// path is open.
func (e *Engine) authorized(r *http.Request) bool {
	if e.cfg.APIKey == "" || r.Method == http.MethodOptions || !strings.HasPrefix(r.URL.Path, "/v1") {
		return true
	}
	scheme, param, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "bearer") &&
		subtle.ConstantTimeCompare([]byte(param), []byte(e.cfg.APIKey)) == 1
}

// allow answers 405 unless r uses one of the methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if slices.Contains(methods, r.Method) {
		return true
	}
	writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"detail": "Method Not Allowed"})
	return false
}

func (e *Engine) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	status := http.StatusOK
	e.mu.Lock()
	if e.closed {
		status = http.StatusServiceUnavailable
	}
	e.mu.Unlock()
	w.WriteHeader(status)
}

func (e *Engine) handleModels(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	type card struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"`
		MaxModelLen int     `json:"max_model_len"`
		Permission  []any   `json:"permission"`
	}
	type list struct {
		Object string `json:"object"`
		Data   []card `json:"data"`
	}
	writeJSON(w, http.StatusOK, list{Object: "list", Data: []card{{
		ID: e.cfg.Model, Object: "model", Created: e.created.Unix(), OwnedBy: "mbench-sim",
		Root: e.cfg.Model, MaxModelLen: e.cfg.MaxModelLen, Permission: []any{},
	}}})
}

func (e *Engine) handleVersion(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Version   string `json:"version"`
		Simulated bool   `json:"simulated"`
	}{"mbench-sim-" + Version, true})
}
