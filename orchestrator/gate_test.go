package orchestrator

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/probes"
)

// fakeGPU is one GPU whose temperature and memory the test sets.
type fakeGPU struct {
	mu        sync.Mutex
	temp, mem float64
}

func (f *fakeGPU) set(temp, mem float64) {
	f.mu.Lock()
	f.temp, f.mem = temp, mem
	f.mu.Unlock()
}

func (f *fakeGPU) read(context.Context) ([]probes.GPUSample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []probes.GPUSample{{Host: "local", GPU: 0, TempC: f.temp, MemUsedMiB: f.mem}}, nil
}

// TestGateWithLoadedEngine: before a run on a running engine the gate
// compares memory with what the engine held when ready (a loaded vLLM never
// returns to idle memory, so comparing with idle would time out every run)
// and temperature with the sweep's idle baseline; after a teardown it waits
// for idle memory and reports that with the next run.
func TestGateWithLoadedEngine(t *testing.T) {
	ctx := context.Background()
	gpu := &fakeGPU{}
	gpu.set(40, 1000)
	g := &probes.Gate{Read: gpu.read, TempBandC: 3, MemToleranceMiB: 512, Timeout: 300 * time.Millisecond, Poll: 10 * time.Millisecond}
	if err := g.MeasureBaseline(ctx); err != nil {
		t.Fatal(err)
	}
	s := &Sweep{m: &matrices.Matrix{}, gpu: &gpuProbe{gate: g}, prog: newProgress(io.Discard, 1, true)}
	s.cur = &engineSet{}
	gpu.set(40, 80000) // the engine is loaded
	if idle, _ := g.Wait(ctx); !idle.TimedOut {
		t.Fatalf("control: a gate on idle memory should time out with the engine loaded: %+v", idle)
	}

	rec := s.gate(ctx).(gateRecord)
	if rec.TimedOut || rec.MemBaseline != "engine loaded" || rec.AfterTeardown != nil {
		t.Errorf("first run on a fresh engine: %+v", rec)
	}

	gpu.set(50, 80000) // hot after a run; cools down in 100 ms
	go func() { time.Sleep(100 * time.Millisecond); gpu.set(41, 80100) }()
	rec = s.gate(ctx).(gateRecord)
	if rec.TimedOut || rec.WaitedS < 0.08 {
		t.Errorf("hot GPU: gate opened after %.3f s (timed out %v), want it to wait for the cool-down", rec.WaitedS, rec.TimedOut)
	}

	gpu.set(50, 80000) // stays hot
	if rec = s.gate(ctx).(gateRecord); !rec.TimedOut || !strings.Contains(rec.Reason, "temperature") {
		t.Errorf("GPU that stays hot: %+v, want timed out on temperature", rec)
	}

	gpu.set(40, 1000) // the engine was stopped: memory freed
	s.cur = nil
	s.waitGateAfterTeardown(ctx)
	s.cur = &engineSet{}
	gpu.set(40, 60000) // the next engine is loaded
	rec = s.gate(ctx).(gateRecord)
	if rec.TimedOut || rec.AfterTeardown == nil || rec.AfterTeardown.TimedOut || rec.MemBaseline != "engine loaded" {
		t.Errorf("after a teardown: %+v (after teardown %+v)", rec, rec.AfterTeardown)
	}
	if rec.GPUs[0].BaseMemUsedMiB != 60000 || rec.GPUs[0].BaseTempC != 40 {
		t.Errorf("baseline of the new engine: %+v, want its loaded memory and the idle temperature", rec.GPUs[0])
	}
}
