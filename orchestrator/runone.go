package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/results/sweepdir"
)

// run is one run to measure: a cell in a block, with the block's workload
// seed, into its run directory.
type run struct {
	cell  matrices.Cell
	block int
	seed  int64
	dir   string
}

// key names the run (cell/b<block>): in messages, and for the sim's launch
// seeds.
func (r run) key() string { return fmt.Sprintf("%s/b%d", r.cell.ID, r.block) }

// measurer measures one run into its directory: the engine, the gate, the
// probes, the load, the step log, the summary and its verdict. An error is
// a run that failed.
type measurer interface {
	measure(ctx context.Context, r run) (*results.RunSummary, error)
}

// runner measures one run: it makes sure the run's engine set is up
// (reusing the running one when the launch is the same), waits at the gate,
// starts the probes and the /metrics window, drives the load, collects the
// step log and the router's log, and summarizes and judges the run into its
// directory. It journals nothing: that is the loop's.
type runner struct {
	*sweepLog
	m       *matrices.Matrix
	store   *store // the engine's version goes into the fingerprint
	engines *launcher
	instr   *instruments
	// runtime renders the matrix's launches (where mbench and the step logs
	// are on each host, the address engines bind).
	runtime func() matrices.Runtime
	request openloop.Request // what every request carries, its API key read when the sweep started
	force   bool             // accept a changed engine version
	pin     *pinning         // the load generator's CPUs, where the sweep pins it
}

func (s *runner) isSim() bool { return s.m.Engine.Kind == matrices.EngineSim }

// measure is the body of a run: engine, gate, probes, load, step log,
// summary. Everything it writes lands in r.dir.
func (s *runner) measure(ctx context.Context, r run) (*results.RunSummary, error) {
	cell, block, seed, dir := r.cell, r.block, r.seed, r.dir
	es, err := s.ensureEngine(ctx, cell, r.key())
	if err != nil {
		return nil, err
	}
	gate := s.instr.gate(ctx, es, r.key())
	s.prog.setPhase("ready")

	offsets := stepLogOffsets(ctx, es)
	watch, err := s.watchContention(ctx, es)
	if err != nil {
		return nil, err
	}
	defer watch.stop()
	probeStop, probeDone := s.instr.startProbes(ctx, dir, es)
	reqFile, err := os.Create(filepath.Join(dir, "requests.jsonl"))
	if err != nil {
		probeStop()
		return nil, fmt.Errorf("create requests.jsonl: %w", err)
	}
	metricsFile, err := os.Create(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		reqFile.Close()
		probeStop()
		return nil, fmt.Errorf("create metrics.jsonl: %w", err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	win := probes.NewWindow(ctx, &probes.Scraper{Client: &http.Client{Timeout: 2 * time.Second, Transport: tr},
		Targets: instanceURLs(es), Interval: time.Second, Sink: metricsFile}, s.profile().Metrics)
	cfg := s.loadConfig(cell, block, seed, es.targets)
	cfg.Vocab = es.vocab
	sink := &sinkWriter{w: reqFile}
	cfg.Sink = sink
	cfg.Progress = func(p openloop.Progress) { s.prog.setPhase(p.Phase) }
	cfg.OnPhase = func(p string) { win.OnPhase(ctx, p) }
	s.resetRoutes(ctx, es)
	res, loadErr := driveLoad(ctx, es, cfg)
	contention := watch.finish(context.WithoutCancel(ctx), s)
	closeErr := reqFile.Close()
	before, after, cache, _, scrErr := win.Close(ctx)
	tr.CloseIdleConnections()
	scrErr = errors.Join(scrErr, metricsFile.Close())
	probeStop()
	<-probeDone
	if err := s.loadOutcome(ctx, es, sink.err, loadErr, closeErr, scrErr); err != nil {
		return nil, err
	}
	steps, err := s.collectSteps(ctx, es, offsets, res, dir)
	if err != nil {
		return nil, err
	}
	gpu := s.instr.gpuSummary(dir, es)
	sum, err := results.SummarizeRun(results.RunInput{
		Cell: cell.ID, Config: cell.Config, Shape: cell.Shape, Rate: cell.Rate, Block: block,
		Engine: string(s.m.Engine.Kind), Simulated: s.isSim(), Arrival: arrivalName(s.m.Arrival.Process, cell.Spec),
		Burstiness: s.m.Arrival.Burstiness,
		Steps:      steps, GPU: gpu, Cache: &cache, Gate: gate, Contention: contention,
		Policy: s.policy(cell), Percentiles: s.m.Measure.Percentiles, NaturalLength: s.request.NaturalLength,
	}.WithLoad(res))
	if err != nil {
		return nil, fmt.Errorf("summarize run: %w", err)
	}
	newTok, err := s.saveRoutes(ctx, es, dir)
	if err != nil {
		return nil, err
	}
	basis, classTok := s.classTokens(cell, newTok)
	sum.Classes = results.SummarizeClasses(res.Records, basis, classTok, s.m.ClassBounds)
	sum.Instances = results.SummarizeInstances(s.profile().Metrics, before, after)
	if err := sweepdir.WriteRunSummary(filepath.Join(dir, "summary_A.json"), sum); err != nil {
		return nil, fmt.Errorf("write summary_A.json: %w", err)
	}
	return sum, nil
}

// stepLogOffsets is the size of each instance's step log before the run:
// the run's steps are what comes after.
func stepLogOffsets(ctx context.Context, es *engineSet) []int64 {
	offsets := make([]int64, len(es.procs))
	for i, p := range es.procs {
		if p.stepLog == "" {
			continue
		}
		if n, err := p.host.Size(ctx, p.stepLog); err == nil && n > 0 {
			offsets[i] = n
		}
	}
	return offsets
}

// driveLoad runs the open-loop load of cfg against es. Each run opens its
// own connections and closes them at its end: none outlives the run
// (thousands of runs must not pile up sockets), and no run inherits a warm
// connection from the one before. An engine that dies mid-run ends the load
// at once rather than after measure.timeout of requests to a dead port.
func driveLoad(ctx context.Context, es *engineSet, cfg openloop.Config) (*openloop.Result, error) {
	// No Config.Client: plain-http targets go over the load generator's own
	// HTTP/1.1 client, which never loses a request to a server that closes
	// its connections after a response (llama-server does after every
	// stream); net/http does not resend a POST that met a closed idle
	// connection. Either client closes the run's connections when it ends.
	cfg.Client = nil
	loadCtx, loadCancel := context.WithCancel(ctx)
	defer loadCancel()
	stopWatch := watchEngines(loadCtx, es, loadCancel)
	defer stopWatch()
	return openloop.Run(loadCtx, cfg)
}

// loadOutcome says whether the load left a run to summarize: not when the
// sweep was interrupted, an engine died (it is stopped, its log tail
// quoted), or a file of the run could not be written.
func (s *runner) loadOutcome(ctx context.Context, es *engineSet, sinkErr, loadErr, closeErr, scrErr error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if dead := es.deadAfterLoad(ctx); dead != nil {
		tail := logExcerpt(dead.proc.LogTail(context.WithoutCancel(ctx), excerptScan), 20)
		s.engines.stop(context.WithoutCancel(ctx)) // es is the running set
		return fmt.Errorf("%s on host %s exited during the run (%v); last lines of its log:\n%s", dead.name, dead.hostName, dead.proc.Err(), s.redact(tail))
	}
	switch {
	case sinkErr != nil:
		// The load generator stops on a failed write and calls the run
		// aborted; the file is incomplete, so the run must not count.
		return fmt.Errorf("write requests.jsonl: %w", sinkErr)
	case loadErr != nil:
		return fmt.Errorf("load: %w", loadErr)
	case closeErr != nil:
		return fmt.Errorf("write requests.jsonl: %w", closeErr)
	case scrErr != nil:
		return fmt.Errorf("write metrics.jsonl: %w", scrErr)
	}
	return nil
}

// sinkWriter remembers the first error writing requests.jsonl. The load
// generator writes from one goroutine and is done when Run returns.
type sinkWriter struct {
	w   io.Writer
	err error
}

func (s *sinkWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil && s.err == nil {
		s.err = err
	}
	return n, err
}

func arrivalName(p string, sh openloop.Shape) string {
	if sh.Trace != nil {
		return openloop.ArrivalTrace
	}
	if p == "" {
		return openloop.ArrivalPoisson
	}
	return p // matrices.ArrivalBurst names itself
}

// ensureEngine reuses the running engine when the next run has the same
// launch spec, else tears it down and launches the one the cell needs for
// the run named run.
func (s *runner) ensureEngine(ctx context.Context, cell matrices.Cell, run string) (*engineSet, error) {
	l, err := s.m.Launch(cell.Config, s.runtime())
	if err != nil {
		return nil, fmt.Errorf("render launch of config %s: %w", cell.Config, err)
	}
	cur := s.engines.cur
	if cur != nil && cur.launch.Key == l.Key && cur.dead() == nil && s.m.Engine.Restart != "every_run" {
		return cur, nil // reused
	}
	if cur != nil {
		if err := s.engines.stop(context.WithoutCancel(ctx)); err != nil {
			s.logf("warning: %v", err)
		}
		s.instr.waitGateAfterTeardown(ctx)
	}
	s.prog.setPhase("launch")
	es, err := s.engines.start(ctx, l, run)
	if first, ok := errors.AsType[*startError](err); ok && ctx.Err() == nil {
		// One relaunch: a start can fail for a passing reason (a port
		// still held, a node slow to mount the model). The same cause
		// twice is the config's: no later run of it would start either.
		s.logf("config %s: the engine failed before it was ready (%s); launching it once more", cell.Config, first.cause)
		es, err = s.engines.start(ctx, l, run)
		if second, ok := errors.AsType[*startError](err); ok && second.sameCause(first) {
			return nil, &configStartError{config: cell.Config, launches: 2, last: second}
		}
	}
	if err != nil {
		return nil, err
	}
	if err := s.checkEngineVersion(ctx, es); err != nil {
		return nil, err
	}
	if err := s.learnVocab(ctx, es); err != nil {
		return nil, err
	}
	return es, nil
}

// loadConfig is the matrix's spec of the cell's run, sent to targets.
func (s *runner) loadConfig(cell matrices.Cell, block int, seed int64, targets []string) openloop.Config {
	cfg := s.m.RunConfig(cell)
	cfg.Targets, cfg.Model, cfg.TokenIDs = targets, s.m.RequestModel(), s.m.Engine.TokenIDs
	cfg.Endpoint, cfg.Request = s.m.Endpoint, s.request
	cfg.Seed, cfg.Block = seed, block
	return cfg
}

// policy is what a run of cell is held to for its verdict.
func (s *runner) policy(cell matrices.Cell) results.Policy {
	p := results.Policy{MinCompleted: s.m.MinCompleted(cell),
		MaxErrorRate: s.m.Measure.MaxErrorRate, MaxErrorRateSet: s.m.Measure.MaxErrorRateSet,
		AllowShortOutputs: s.m.Measure.AllowShortOutputs}
	if s.m.SLO != nil {
		p.SLO = new(*s.m.SLO) // a copy: the policy is the run's own
	}
	return p
}

// watchEngines calls stop as soon as any process of es exits, until the
// returned function is called.
func watchEngines(ctx context.Context, es *engineSet, stop func()) func() {
	done := make(chan struct{})
	for _, p := range es.all() {
		go func() {
			select {
			case <-p.proc.Done():
				stop()
			case <-done:
			case <-ctx.Done():
			}
		}()
	}
	return func() { close(done) }
}
