package probes

import (
	"context"
	"errors"
	"fmt"
)

// BaselineKind names what a gate baseline stands for.
type BaselineKind string

// The gate's baselines.
const (
	// BaselineIdle is the GPUs before the first launch of a sweep.
	BaselineIdle BaselineKind = "idle"
	// BaselineEngineLoaded is the memory the running engine set held once
	// ready (with the idle temperatures).
	BaselineEngineLoaded BaselineKind = "engine loaded"
)

// BaselineMethod says how a baseline reading was taken.
type BaselineMethod string

// The ways a baseline is taken.
const (
	// BaselineClean: a reading with no foreign process on any GPU.
	BaselineClean BaselineMethod = "no foreign process"
	// BaselineForeignSubtracted: foreign processes stayed past the gate's
	// timeout; the memory NVML charges to them was subtracted from the
	// reading (an estimate: their CUDA context overhead may remain).
	BaselineForeignSubtracted BaselineMethod = "foreign memory subtracted"
)

// BaselineGPU is one GPU of a baseline.
type BaselineGPU struct {
	Host       string  `json:"host"`
	GPU        int     `json:"gpu"`
	MemUsedMiB float64 `json:"mem_used_mib"`
	TempC      float64 `json:"temp_c"`
	// ForeignMiB is the foreign processes' memory subtracted from the
	// reading (BaselineForeignSubtracted only).
	ForeignMiB float64 `json:"foreign_mib,omitempty"`
}

// BaselineRecord says how a baseline was taken, for the run summaries.
type BaselineRecord struct {
	Kind      BaselineKind   `json:"kind"`
	Method    BaselineMethod `json:"method"`
	TakenTsUs int64          `json:"taken_ts_us"`
	// WaitedS is how long the gate waited for foreign processes to leave
	// before the reading.
	WaitedS float64 `json:"waited_s"`
	Polls   int     `json:"polls"`
	// Foreign names the foreign processes on the GPUs at the reading.
	Foreign []string      `json:"foreign,omitempty"`
	GPUs    []BaselineGPU `json:"gpus"`
}

// TakeBaseline reads the GPUs until no foreign process (see Gate.Owner) is
// on any of them, up to the gate's timeout, so that a baseline never counts
// another process's memory. When foreign processes stay, it keeps the last
// reading with their memory subtracted, and the record says so. Read errors
// are retried until the timeout; a context error ends it.
func (g *Gate) TakeBaseline(ctx context.Context, kind BaselineKind) ([]GPUSample, BaselineRecord, error) {
	_, _, timeout, poll, clock := g.defaults()
	rec := BaselineRecord{Kind: kind, Method: BaselineClean}
	start := clock.Now()
	deadline := start.Add(timeout)
	var last []GPUSample // the last good reading
	for {
		rec.Polls++
		cur, err := g.Read(ctx)
		now := clock.Now()
		rec.WaitedS = now.Sub(start).Seconds()
		if err == nil {
			last = cur
		}
		expired := !now.Before(deadline)
		// A clean reading; at the deadline the last good one (a read may
		// have failed since), foreign memory subtracted.
		if foreign := g.foreignOn(last); last != nil && (err == nil && len(foreign) == 0 || expired) {
			return subtractForeign(last, foreign), g.recordOf(last, foreign, now.UnixMicro(), rec), nil
		}
		if expired {
			return nil, rec, fmt.Errorf("no reading in %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return nil, rec, errors.Join(ctx.Err(), err)
		case <-clock.After(min(poll, deadline.Sub(now))):
		}
	}
}

// foreignOn lists, per reading, the foreign processes of each GPU.
func (g *Gate) foreignOn(cur []GPUSample) map[GPUKey][]GPUProc {
	out := map[GPUKey][]GPUProc{}
	for _, s := range cur {
		if _, f := SplitProcs(g.Owner, s.Host, s.Procs); len(f) > 0 {
			out[GPUKey{s.Host, s.GPU}] = f
		}
	}
	return out
}

// subtractForeign subtracts the foreign processes' memory from a reading.
func subtractForeign(cur []GPUSample, foreign map[GPUKey][]GPUProc) []GPUSample {
	out := append([]GPUSample(nil), cur...)
	for i, s := range out {
		for _, p := range foreign[GPUKey{s.Host, s.GPU}] {
			out[i].MemUsedMiB = max(0, out[i].MemUsedMiB-p.UsedMiB)
		}
	}
	return out
}

// recordOf fills a baseline record from the reading it was taken from.
func (g *Gate) recordOf(cur []GPUSample, foreign map[GPUKey][]GPUProc, tsUs int64, rec BaselineRecord) BaselineRecord {
	rec.TakenTsUs = tsUs
	for _, s := range cur {
		bg := BaselineGPU{Host: s.Host, GPU: s.GPU, MemUsedMiB: s.MemUsedMiB, TempC: s.TempC}
		for _, p := range foreign[GPUKey{s.Host, s.GPU}] {
			rec.Method = BaselineForeignSubtracted
			rec.Foreign = append(rec.Foreign, fmt.Sprintf("%s/gpu%d: %s", s.Host, s.GPU, p))
			bg.ForeignMiB += p.UsedMiB
		}
		bg.MemUsedMiB = max(0, bg.MemUsedMiB-bg.ForeignMiB)
		rec.GPUs = append(rec.GPUs, bg)
	}
	return rec
}

// GateRecord is the gate object of a run summary: the checks made for that
// run, each named by what it measured, and how their baselines were taken.
type GateRecord struct {
	Enabled bool `json:"enabled"`
	// Note says why the gate is off for the run, or the error that ended
	// a wait.
	Note string `json:"note,omitempty"`
	// IdleBaseline is the sweep's idle baseline (temperatures, and memory
	// for IdleBeforeLaunch).
	IdleBaseline *BaselineRecord `json:"idle_baseline,omitempty"`
	// EngineLoadedBaseline is the memory the run's engine set held once
	// ready, what BeforeLoad compares memory with.
	EngineLoadedBaseline *BaselineRecord `json:"engine_loaded_baseline,omitempty"`
	// IdleBeforeLaunch is the wait, after the previous engine set was
	// stopped and before this run's engine set was launched, for the GPUs
	// to return to the idle baseline. Only the run that launched its
	// engine set has it (none for the sweep's first launch, which follows
	// the idle baseline itself).
	IdleBeforeLaunch *GateResult `json:"idle_before_launch,omitempty"`
	// BeforeLoad is the wait just before this run's load began.
	BeforeLoad *GateResult `json:"before_load,omitempty"`
}
