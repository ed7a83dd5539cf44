package probes

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Gate defaults.
const (
	DefaultTempBandC       = 3.0
	DefaultMemToleranceMiB = 512.0
	DefaultGateTimeout     = 120 * time.Second
	DefaultGatePoll        = time.Second
)

// Gate holds a run back until the GPUs are back at the sweep's baseline:
// memory used back at its idle level (within MemToleranceMiB above it),
// temperature within ±TempBandC of the baseline, and no foreign process
// (one Owner does not own) on them. This cures the cold/warm ordering
// effect (the first config ran on a cold GPU; docs/design.md), and keeps a run
// from starting while another program shares the GPU.
// Zero fields take the Default* values; a nil Clock is the system clock.
type Gate struct {
	Read            func(ctx context.Context) ([]GPUSample, error) // one reading of every GPU
	Clock           Clock
	TempBandC       float64
	MemToleranceMiB float64
	Timeout         time.Duration
	Poll            time.Duration
	Baseline        []GPUSample // set by MeasureBaseline before the first launch
	// Owner says which GPU processes are the engine's; every other process
	// on a baseline GPU holds the gate closed. nil owns none.
	Owner Owner
	// Kind names Baseline in results ("" = idle).
	Kind BaselineKind
}

// GateGPU is one GPU's state when the gate opened (or timed out).
type GateGPU struct {
	Host           string  `json:"host"`
	GPU            int     `json:"gpu"`
	TempC          float64 `json:"temp_c"`
	BaseTempC      float64 `json:"base_temp_c"`
	MemUsedMiB     float64 `json:"mem_used_mib"`
	BaseMemUsedMiB float64 `json:"base_mem_used_mib"`
	// Foreign are the processes other than the engine's on the GPU.
	Foreign []GPUProc `json:"foreign,omitempty"`
	OK      bool      `json:"ok"`
}

// GateResult is recorded in the run summary.
type GateResult struct {
	Waited   time.Duration `json:"-"`
	WaitedS  float64       `json:"waited_s"`
	TimedOut bool          `json:"timed_out"`
	Skipped  bool          `json:"skipped,omitempty"` // no baseline (no GPU)
	Polls    int           `json:"polls"`
	GPUs     []GateGPU     `json:"gpus,omitempty"`
	// Reason says what was still out of band at the last poll (or why the
	// gate was skipped); empty when the gate opened.
	Reason string `json:"reason,omitempty"`
	// HeldBy says what held the gate at its first poll (empty when it
	// opened at once): what it waited for.
	HeldBy    string  `json:"held_by,omitempty"`
	BandC     float64 `json:"band_c"`
	MemTolMiB float64 `json:"mem_tolerance_mib"`
	// Baseline names what memory was compared with (idle or engine loaded).
	Baseline BaselineKind `json:"baseline,omitempty"`
}

func (g *Gate) defaults() (band, tol float64, timeout, poll time.Duration, c Clock) {
	return orPositive(g.TempBandC, DefaultTempBandC), orPositive(g.MemToleranceMiB, DefaultMemToleranceMiB),
		orPositive(g.Timeout, DefaultGateTimeout), orPositive(g.Poll, DefaultGatePoll), orSystem(g.Clock)
}

// MeasureBaseline takes the idle baseline before the first launch of a
// sweep (see TakeBaseline) and keeps it.
func (g *Gate) MeasureBaseline(ctx context.Context) (BaselineRecord, error) {
	base, rec, err := g.TakeBaseline(ctx, BaselineIdle)
	if err != nil {
		return rec, fmt.Errorf("gate baseline: %w", err)
	}
	g.Baseline = base
	return rec, nil
}

// MeasureLoaded takes the engine-loaded baseline once an engine set is
// ready: the idle baseline with each GPU's memory raised to what it holds
// now (a loaded vLLM never returns to idle memory), taken like
// TakeBaseline. Temperatures stay the idle ones.
func (g *Gate) MeasureLoaded(ctx context.Context) ([]GPUSample, BaselineRecord, error) {
	now, rec, err := g.TakeBaseline(ctx, BaselineEngineLoaded)
	if err != nil {
		return nil, rec, fmt.Errorf("gate engine-loaded baseline: %w", err)
	}
	// The record describes the combined baseline, keeping each GPU's
	// subtracted foreign memory from the reading's record.
	out, reading := slices.Clone(g.Baseline), rec.GPUs
	rec.GPUs = make([]BaselineGPU, 0, len(out))
	for i, b := range out {
		for _, c := range now {
			if c.Host == b.Host && c.GPU == b.GPU && c.MemUsedMiB > b.MemUsedMiB {
				out[i].MemUsedMiB = c.MemUsedMiB
			}
		}
		bg := BaselineGPU{Host: b.Host, GPU: b.GPU, MemUsedMiB: out[i].MemUsedMiB, TempC: b.TempC}
		for _, r := range reading {
			if r.Host == b.Host && r.GPU == b.GPU {
				bg.ForeignMiB = r.ForeignMiB
			}
		}
		rec.GPUs = append(rec.GPUs, bg)
	}
	return out, rec, nil
}

// Wait polls until every baseline GPU is back in band, the timeout passes
// (TimedOut, not an error) or ctx ends (its error). Read errors are retried
// until the timeout and reported in Reason.
func (g *Gate) Wait(ctx context.Context) (GateResult, error) {
	band, tol, timeout, poll, clock := g.defaults()
	res := GateResult{BandC: band, MemTolMiB: tol, Baseline: cmp.Or(g.Kind, BaselineIdle)}
	if len(g.Baseline) == 0 {
		res.Skipped, res.Reason = true, "no GPU baseline (no GPU or NVML unavailable)"
		return res, nil
	}
	start := clock.Now()
	deadline := start.Add(timeout)
	for {
		res.Polls++
		cur, err := g.Read(ctx)
		now := clock.Now()
		res.Waited = now.Sub(start)
		res.WaitedS = res.Waited.Seconds()
		if err != nil {
			res.Reason = "read: " + err.Error()
		} else {
			var ok bool
			res.GPUs, ok, res.Reason = g.check(cur, band, tol)
			if ok {
				return res, nil
			}
		}
		if res.Polls == 1 {
			res.HeldBy = res.Reason
		}
		if !now.Before(deadline) {
			res.TimedOut = true
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-clock.After(min(poll, deadline.Sub(now))):
		}
	}
}

// check compares a reading with the baseline, GPU by GPU (host and index).
func (g *Gate) check(cur []GPUSample, band, tol float64) ([]GateGPU, bool, string) {
	byKey := make(map[GPUKey]GPUSample, len(cur))
	for _, s := range cur {
		byKey[GPUKey{s.Host, s.GPU}] = s
	}
	var (
		out     []GateGPU
		reasons []string
	)
	for _, b := range g.Baseline {
		name := fmt.Sprintf("%s/gpu%d", b.Host, b.GPU)
		s, found := byKey[GPUKey{b.Host, b.GPU}]
		st := GateGPU{Host: b.Host, GPU: b.GPU, BaseTempC: b.TempC, BaseMemUsedMiB: b.MemUsedMiB,
			TempC: s.TempC, MemUsedMiB: s.MemUsedMiB}
		if !found {
			reasons = append(reasons, name+": missing from reading")
			out = append(out, st)
			continue
		}
		memOK := s.MemUsedMiB <= b.MemUsedMiB+tol
		tempOK := math.Abs(s.TempC-b.TempC) <= band
		_, st.Foreign = SplitProcs(g.Owner, s.Host, s.Procs)
		st.OK = memOK && tempOK && len(st.Foreign) == 0
		for _, p := range st.Foreign {
			reasons = append(reasons, fmt.Sprintf("%s: foreign %s", name, p))
		}
		if !memOK {
			reasons = append(reasons, fmt.Sprintf("%s: memory used %.0f MiB > idle %.0f + %.0f MiB",
				name, s.MemUsedMiB, b.MemUsedMiB, tol))
		}
		if !tempOK {
			reasons = append(reasons, fmt.Sprintf("%s: temperature %.0f °C outside baseline %.0f ± %g °C",
				name, s.TempC, b.TempC, band))
		}
		out = append(out, st)
	}
	return out, len(reasons) == 0, strings.Join(reasons, "; ")
}
