package router

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// LoadSource names what the router counts as an instance's load.
type LoadSource string

// Load sources.
const (
	// LoadShadow (the default) is the router's own count of the requests it
	// has in flight on the instance.
	LoadShadow LoadSource = "shadow"
	// LoadEngine is the engine's own, from its /metrics:
	// vllm:num_requests_waiting + vllm:num_requests_running, polled every
	// EnginePoll (router state against the engine's, docs/routing.md).
	// It lags by up to the poll interval and counts requests other clients
	// sent; until an instance has answered once, its shadow load is used.
	LoadEngine LoadSource = "engine"
)

// ParseLoadSource validates a load source name.
func ParseLoadSource(s string) (LoadSource, error) {
	return oneOf("load", s, []LoadSource{LoadShadow, LoadEngine})
}

// EnginePoll is how often LoadEngine polls the instances' /metrics.
const EnginePoll = 100 * time.Millisecond

// engineSnapshot is what one /metrics answer says.
type engineSnapshot struct {
	load      int // waiting + running; -1 when not reported
	kvTokens  int // num_gpu_blocks × block_size of vllm:cache_config_info; 0 when not reported
	hasLoad   bool
	hasKVInfo bool
}

// readEngineMetrics parses the exposition text of vLLM's /metrics (its
// names contain ':', so the parser validates UTF-8 names): the load gauges
// summed over engines, and the KV capacity from vllm:cache_config_info,
// whose labels are the engine's CacheConfig (num_gpu_blocks, block_size).
func readEngineMetrics(r io.Reader) (engineSnapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return engineSnapshot{}, err
	}
	var s engineSnapshot
	for _, name := range []string{"vllm:num_requests_waiting", "vllm:num_requests_running"} {
		mf, ok := fams[name]
		if !ok {
			continue
		}
		s.hasLoad = true
		for _, m := range mf.GetMetric() {
			s.load += int(m.GetGauge().GetValue() + m.GetUntyped().GetValue())
		}
	}
	if mf, ok := fams["vllm:cache_config_info"]; ok {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			blocks, err1 := strconv.Atoi(labels["num_gpu_blocks"])
			size, err2 := strconv.Atoi(labels["block_size"])
			if err1 == nil && err2 == nil && blocks > 0 && size > 0 {
				s.kvTokens += blocks * size // per engine (DP ranks report one each)
				s.hasKVInfo = true
			}
		}
	}
	return s, nil
}

// pollEngines reads every instance's /metrics in the background until ctx
// ends: once, for the KV capacity, when CacheBlocks is taken from the
// engines; every EnginePoll for LoadEngine.
func (s *Server) pollEngines(ctx context.Context) {
	needKV, needLoad := s.r.opt.CacheFromEngine, s.r.opt.Load == LoadEngine
	if !needKV && !needLoad {
		return
	}
	c := &http.Client{Timeout: 2 * time.Second}
	go func() {
		t := time.NewTicker(EnginePoll)
		defer t.Stop()
		kvKnown := make([]bool, len(s.r.inst))
		for {
			for i := range s.r.inst {
				snap, err := s.scrapeEngine(ctx, c, i)
				if err != nil {
					continue
				}
				if needKV && !kvKnown[i] && snap.hasKVInfo {
					kvKnown[i] = true
					blocks := s.r.setCapacity(i, snap.kvTokens)
					fmt.Fprintf(s.opt.Messages, "router: %s holds %d KV tokens (vllm:cache_config_info): prefix index bounded to %d blocks\n", s.r.URL(i), snap.kvTokens, blocks)
				}
				if needLoad && snap.hasLoad {
					s.r.setEngineLoad(i, snap.load)
				}
			}
			if !needLoad && !slices.Contains(kvKnown, false) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// scrapeEngine GETs instance i's /metrics.
func (s *Server) scrapeEngine(ctx context.Context, c *http.Client, i int) (engineSnapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.r.URL(i)+"/metrics", nil)
	if err != nil {
		return engineSnapshot{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return engineSnapshot{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return engineSnapshot{}, fmt.Errorf("%s/metrics: status %d", s.r.URL(i), resp.StatusCode)
	}
	return readEngineMetrics(io.LimitReader(resp.Body, 16<<20))
}

// setCapacity bounds instance i's prefix index to an engine's KV capacity
// of kvTokens tokens and returns the bound in index blocks.
func (r *Router) setCapacity(i, kvTokens int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	blocks := max(1, kvTokens/r.opt.BlockTokens)
	r.inst[i].index.resize(blocks)
	return blocks
}

// setEngineLoad records instance i's load as its engine reports it.
func (r *Router) setEngineLoad(i, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inst[i].engineLoad = n
}

// load is instance i's load for placement: its shadow in-flight count, or
// the engine's own under LoadEngine once known. Under r.mu.
func (r *Router) load(i int) int {
	in := r.inst[i]
	if r.opt.Load == LoadEngine && in.engineLoad >= 0 {
		return in.engineLoad
	}
	return in.inflight
}
