package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
)

// gpuProbe holds the sweep's NVML handle and gate. A machine without a GPU
// gets nil, said once.
type gpuProbe struct {
	sampler func() *probes.Sampler
	gate    *probes.Gate
	close   func()
}

// openGPU opens NVML on this machine. When it fails, GPU samples are off for
// the sweep and the summaries say "gpu: unavailable".
func (s *Sweep) openGPU(ctx context.Context) {
	lib, shutdown, err := probes.OpenNVML()
	if err != nil {
		s.logf("probe: NVML unavailable (%v): GPU samples off, host samples continue", err)
		lib = nil
	}
	interval := s.m.Probe.Interval
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	g := &gpuProbe{close: func() {}}
	if shutdown != nil {
		g.close = shutdown
	}
	g.sampler = func() *probes.Sampler { return probes.NewSampler(lib, "local", interval, nil) }
	if lib != nil && s.m.Gate.Enabled {
		reader := probes.NewSampler(lib, "local", interval, nil)
		g.gate = &probes.Gate{
			Read:            func(context.Context) ([]probes.GPUSample, error) { return reader.SampleGPUs() },
			TempBandC:       s.m.Gate.TempBandC,
			MemToleranceMiB: float64(s.m.Gate.MemToleranceMiB),
			Timeout:         s.m.Gate.Timeout,
			Poll:            time.Second,
		}
		if err := g.gate.MeasureBaseline(ctx); err != nil {
			s.logf("gate: baseline not measured (%v): gate off", err)
			g.gate = nil
		}
	}
	s.gpu = g
}

// startProbes samples the local GPUs and host into the run directory until
// stop is called.
func (s *Sweep) startProbes(ctx context.Context, dir string) (stop func(), done <-chan struct{}) {
	ch := make(chan struct{})
	if s.gpu == nil {
		close(ch)
		return func() {}, ch
	}
	pctx, cancel := context.WithCancel(ctx)
	gf, err1 := os.Create(filepath.Join(dir, "gpu.jsonl"))
	hf, err2 := os.Create(filepath.Join(dir, "host.jsonl"))
	if err := errors.Join(err1, err2); err != nil {
		s.logf("warning: probes off for this run: %v", err)
		cancel()
		close(ch)
		return func() {}, ch
	}
	go func() {
		defer close(ch)
		if err := s.gpu.sampler().Run(pctx, gf, hf); err != nil && pctx.Err() == nil {
			s.logf("warning: probe: %v", err)
		}
		gf.Close()
		hf.Close()
	}()
	return cancel, ch
}

// gpuSummary summarizes the run's gpu.jsonl.
func (s *Sweep) gpuSummary(dir string) *probes.GPUSummary {
	f, err := os.Open(filepath.Join(dir, "gpu.jsonl"))
	if err != nil {
		return &probes.GPUSummary{Available: false, Reason: "no GPU samples (NVML unavailable)"}
	}
	defer f.Close()
	samples, err := probes.ReadGPUSamples(f)
	if err != nil {
		return &probes.GPUSummary{Available: false, Reason: fmt.Sprintf("gpu.jsonl unreadable: %v", err)}
	}
	g := probes.SummarizeGPU(samples)
	return &g
}

// gate waits, before a run, until the GPUs are back at their idle memory
// and within the temperature band of the sweep's baseline. The result goes
// into the run's summary.
func (s *Sweep) gate(ctx context.Context) any {
	if s.gpu == nil || s.gpu.gate == nil {
		return map[string]any{"enabled": false, "reason": "gpu unavailable or gate disabled"}
	}
	s.prog.setPhase("gate")
	r, err := s.gpu.gate.Wait(ctx)
	if err != nil {
		return map[string]any{"enabled": true, "error": err.Error()}
	}
	return r
}

func (s *Sweep) waitGateAfterTeardown(ctx context.Context) {}

// scraper reads every instance's /metrics.
type scraper struct {
	client  *http.Client
	targets []string
}

func newScraper(es *engineSet) *scraper {
	sc := &scraper{client: &http.Client{Timeout: 2 * time.Second}}
	for _, p := range es.procs {
		sc.targets = append(sc.targets, p.url+"/metrics")
	}
	return sc
}

func (sc *scraper) scrape(ctx context.Context) []probes.Scrape {
	var mu sync.Mutex
	var out []probes.Scrape
	var wg sync.WaitGroup
	for _, t := range sc.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := probes.ScrapeMetrics(ctx, sc.client, t)
			if err != nil {
				return
			}
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func (sc *scraper) every(ctx context.Context, d time.Duration) []probes.Scrape {
	var out []probes.Scrape
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
			out = append(out, sc.scrape(ctx)...)
		}
	}
}

// checkEngineVersion records the engine's version in the fingerprint, and
// refuses to mix results with another version unless forced.
func (s *Sweep) checkEngineVersion(ctx context.Context, es *engineSet) error {
	if len(es.procs) == 0 {
		return nil
	}
	v := engineVersion(ctx, es.procs[0].url)
	if v == "" {
		return nil
	}
	old, had := s.state.Fingerprint["engine_version"]
	if had && old != v && !s.opts.Force {
		return fmt.Errorf("%w: engine version changed from %q to %q; results would mix two engines (use --force to accept)", errFingerprint, old, v)
	}
	if !had || old != v {
		s.state.Fingerprint["engine_version"] = v
		return writeSweep(s.dir, s.state)
	}
	return nil
}

var errFingerprint = errors.New("environment fingerprint changed")

func isDiskFull(err error) bool { return errors.Is(err, syscall.ENOSPC) }

func toLoadShape(sh matrices.Shape) openloop.Shape {
	out := openloop.Shape{Name: sh.Name, Input: sh.Input, Output: sh.Output}
	conv := func(d *matrices.Dist) *openloop.Dist {
		if d == nil {
			return nil
		}
		return &openloop.Dist{Kind: d.Kind, Min: d.Min, Max: d.Max, Median: d.Median, P90: d.P90}
	}
	out.InputDist, out.OutputDist = conv(sh.InputDist), conv(sh.OutputDist)
	if p := sh.Prefix; p != nil {
		out.Prefix = &openloop.Prefix{NumPrefixes: p.NumPrefixes, PrefixTokens: p.PrefixTokens}
	}
	if c := sh.CacheFill; c != nil {
		out.CacheFill = &openloop.CacheFill{Prefixes: c.Prefixes, PrefixTokens: c.PrefixTokens}
	}
	if t := sh.Trace; t != nil {
		out.Trace = &openloop.Trace{Path: t.Path, TimeScale: t.TimeScale, RequestLimit: t.RequestLimit, MaxInflightSessions: t.MaxInflightSessions}
	}
	return out
}
