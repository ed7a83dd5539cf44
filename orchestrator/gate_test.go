package orchestrator

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/probes"
)

// fakeGPU is one GPU whose temperature, memory and processes the test sets.
type fakeGPU struct {
	mu        sync.Mutex
	temp, mem float64
	procs     []probes.GPUProc
}

func (f *fakeGPU) set(temp, mem float64, procs ...probes.GPUProc) {
	f.mu.Lock()
	f.temp, f.mem, f.procs = temp, mem, procs
	f.mu.Unlock()
}

func (f *fakeGPU) read(context.Context) ([]probes.GPUSample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []probes.GPUSample{{Host: "local", GPU: 0, TempC: f.temp, MemUsedMiB: f.mem, Procs: f.procs}}, nil
}

// fakeProc is a hosts.Process with a pid only.
type fakeProc struct {
	hosts.Process
	pid int
}

func (p fakeProc) Pid() int { return p.pid }

// gateSweep is a sweep's instruments with the fake GPU behind their gate,
// owned by the running engine set.
func gateSweep(t *testing.T, gpu *fakeGPU) *instruments {
	t.Helper()
	m := &matrices.Matrix{Hosts: map[string]matrices.Host{"box": {Name: "box", Address: "local"}}}
	log := newSweepLog(m.Redact, t.TempDir(), io.Discard, true)
	log.prog = newProgress(io.Discard, 1, true)
	s := &instruments{sweepLog: log, m: m, hosts: &fleet{m: m}, engines: &launcher{sweepLog: log, m: m}}
	g := &probes.Gate{Read: gpu.read, TempBandC: 3, MemToleranceMiB: 512, Timeout: 300 * time.Millisecond,
		Poll: 10 * time.Millisecond, Owner: runningEngine{s}}
	rec, err := g.MeasureBaseline(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.gpu = &gpuProbe{gate: g, idleRec: &rec, localGate: true}
	return s
}

// engineWithPid is a running engine set of one local process.
func engineWithPid(pid int) *engineSet {
	return &engineSet{procs: []*engineProc{{hostName: "box", proc: fakeProc{pid: pid}}}}
}

// TestGateWithLoadedEngine: before a run on a running engine the gate
// compares memory with what the engine held when ready (a loaded vLLM never
// returns to idle memory, so comparing with idle would time out every run)
// and temperature with the sweep's idle baseline; after a teardown it waits
// for idle memory and reports that with the run that launched next.
func TestGateWithLoadedEngine(t *testing.T) {
	ctx := context.Background()
	gpu := &fakeGPU{}
	gpu.set(40, 1000)
	s := gateSweep(t, gpu)
	s.engines.cur = engineWithPid(500)
	worker := probes.GPUProc{Pid: 501, Name: "VLLM::Worker", Pgid: 500, Sid: 500, UsedMiB: 79000}
	gpu.set(40, 80000, worker) // the engine is loaded
	if idle, _ := s.gpu.gate.Wait(ctx); !idle.TimedOut {
		t.Fatalf("control: a gate on idle memory should time out with the engine loaded: %+v", idle)
	}

	rec := s.gate(ctx, s.engines.cur, "c/b1")
	if !rec.Enabled || rec.BeforeLoad.TimedOut || rec.BeforeLoad.Baseline != probes.BaselineEngineLoaded ||
		rec.IdleBeforeLaunch != nil || rec.EngineLoadedBaseline == nil || rec.IdleBaseline == nil {
		t.Errorf("first run on a fresh engine: %+v", rec)
	}

	gpu.set(50, 80000, worker) // hot after a run; cools down in 100 ms
	go func() { time.Sleep(100 * time.Millisecond); gpu.set(41, 80100, worker) }()
	rec = s.gate(ctx, s.engines.cur, "c/b1")
	if rec.BeforeLoad.TimedOut || rec.BeforeLoad.WaitedS < 0.08 || !strings.Contains(rec.BeforeLoad.HeldBy, "temperature 50") {
		t.Errorf("hot GPU: gate opened after %.3f s (timed out %v, held by %q), want it to wait for the cool-down",
			rec.BeforeLoad.WaitedS, rec.BeforeLoad.TimedOut, rec.BeforeLoad.HeldBy)
	}

	gpu.set(50, 80000, worker) // stays hot
	if rec = s.gate(ctx, s.engines.cur, "c/b1"); !rec.BeforeLoad.TimedOut || !strings.Contains(rec.BeforeLoad.Reason, "temperature") {
		t.Errorf("GPU that stays hot: %+v, want timed out on temperature", rec.BeforeLoad)
	}

	gpu.set(40, 1000) // the engine was stopped: memory freed
	s.engines.cur = nil
	s.waitGateAfterTeardown(ctx)
	s.engines.cur = engineWithPid(600)
	gpu.set(40, 60000, probes.GPUProc{Pid: 601, Pgid: 600, Sid: 600, Name: "VLLM::Worker"}) // the next engine is loaded
	rec = s.gate(ctx, s.engines.cur, "c/b1")
	if rec.BeforeLoad.TimedOut || rec.IdleBeforeLaunch == nil || rec.IdleBeforeLaunch.TimedOut ||
		rec.IdleBeforeLaunch.Baseline != probes.BaselineIdle || rec.BeforeLoad.Baseline != probes.BaselineEngineLoaded {
		t.Errorf("after a teardown: %+v (idle before launch %+v)", rec.BeforeLoad, rec.IdleBeforeLaunch)
	}
	if g := rec.BeforeLoad.GPUs[0]; g.BaseMemUsedMiB != 60000 || g.BaseTempC != 40 {
		t.Errorf("baseline of the new engine: %+v, want its loaded memory and the idle temperature", g)
	}
	if rec = s.gate(ctx, s.engines.cur, "c/b1"); rec.IdleBeforeLaunch != nil {
		t.Errorf("the second run on the engine carries the launch's idle gate: %+v", rec.IdleBeforeLaunch)
	}
}

// TestGateForeignProcess: a foreign process on the GPU holds the gate (the
// idle gate after a teardown and the gate before a run) until it leaves,
// and the engine-loaded baseline taken while it runs leaves its memory out.
func TestGateForeignProcess(t *testing.T) {
	ctx := context.Background()
	gpu := &fakeGPU{}
	gpu.set(40, 600)
	s := gateSweep(t, gpu)
	torch := probes.GPUProc{Pid: 947, Name: "python3", Pgid: 427, Sid: 427, UsedMiB: 1130}

	// A foreign process arrives while the previous engine is stopped.
	gpu.set(40, 1754, torch)
	go func() { time.Sleep(100 * time.Millisecond); gpu.set(40, 615) }()
	s.waitGateAfterTeardown(ctx)
	s.engines.cur = engineWithPid(700)
	rec := s.gate(ctx, s.engines.cur, "c/b1")
	il := rec.IdleBeforeLaunch
	if il == nil || il.TimedOut || il.WaitedS < 0.08 || !strings.Contains(il.HeldBy, "foreign pid 947 (python3, 1130 MiB)") {
		t.Fatalf("idle before launch: %+v, want it to wait for pid 947 to leave", il)
	}

	// A foreign process present when the engine-loaded baseline is taken:
	// the baseline waits for it, and when it stays, leaves its memory out.
	s.engines.cur = engineWithPid(800)
	engine := probes.GPUProc{Pid: 801, Pgid: 800, Sid: 800, UsedMiB: 70000}
	gpu.set(40, 600+70000+1130, engine, torch)
	rec = s.gate(ctx, s.engines.cur, "c/b1")
	lb := rec.EngineLoadedBaseline
	if lb == nil || lb.Method != probes.BaselineForeignSubtracted || lb.GPUs[0].MemUsedMiB != 70600 || lb.GPUs[0].ForeignMiB != 1130 {
		t.Errorf("engine-loaded baseline with a foreign process that stays: %+v", lb)
	}
	if b := rec.BeforeLoad; !b.TimedOut || !strings.Contains(b.Reason, "foreign pid 947") || b.GPUs[0].OK {
		t.Errorf("before load with a foreign process: %+v, want timed out naming pid 947", b)
	}
	gpu.set(40, 70600, engine) // it left: the engine's own process does not hold the gate
	if b := s.gate(ctx, s.engines.cur, "c/b1").BeforeLoad; b.TimedOut || b.Polls != 1 {
		t.Errorf("with only the engine's process: %+v", b)
	}
}

// TestGPUSummaryOwnership: a run's summary counts the processes of the
// running engine set, on this machine ("local" in gpu.jsonl) and on a
// remote host (its matrix name), as its own, and any other as foreign; the
// throttle bound is the matrix's.
func TestGPUSummaryOwnership(t *testing.T) {
	m := &matrices.Matrix{
		Hosts: map[string]matrices.Host{"box": {Name: "box", Address: "local"}, "far": {Name: "far", Address: "gpu7.example"}},
		Probe: matrices.Probe{ThrottleMaxFraction: 0.5},
	}
	s := &instruments{m: m, hosts: &fleet{m: m}, engines: &launcher{m: m}}
	s.engines.cur = &engineSet{procs: []*engineProc{
		{hostName: "box", proc: fakeProc{pid: 500}}, {hostName: "far", proc: fakeProc{pid: 900}},
	}}
	if g := s.engineGroups(s.engines.cur); len(g) != 2 || g["local"][0] != 500 || g["far"][0] != 900 {
		t.Fatalf("engine groups %v", g)
	}
	dir := t.TempDir()
	lines := []string{
		`{"ts_us":1000000,"host":"local","gpu":0,"procs":[{"pid":501,"used_mib":70000,"name":"VLLM::Worker","pgid":501,"sid":500}],"throttle_reasons":4}`,
		`{"ts_us":1000000,"host":"far","gpu":0,"procs":[{"pid":901,"used_mib":70000,"name":"VLLM::Worker","pgid":900,"sid":900},{"pid":31,"used_mib":900,"name":"python3","pgid":31,"sid":30}]}`,
		`{"ts_us":2000000,"host":"local","gpu":0,"procs":[{"pid":501,"used_mib":70000,"name":"VLLM::Worker","pgid":501,"sid":500}]}`,
		`{"ts_us":2000000,"host":"far","gpu":0}`,
	}
	if err := os.WriteFile(filepath.Join(dir, "gpu.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := s.gpuSummary(dir, s.engines.cur)
	if !sum.Contended || sum.ContendedReason != "foreign process on the GPUs during the window: far/gpu0: pid 31 (python3, up to 900 MiB)" {
		t.Errorf("contended %v %q", sum.Contended, sum.ContendedReason)
	}
	if len(sum.PerGPU) != 2 || len(sum.PerGPU[1].OwnProcs) != 1 || len(sum.PerGPU[0].OwnProcs) != 1 || len(sum.PerGPU[0].ForeignProcs) != 1 {
		t.Errorf("per GPU %+v", sum.PerGPU)
	}
	// local/gpu0 was power-capped for its one interval of two samples:
	// 100 %, over the matrix's 50 %.
	if !sum.Throttled || sum.ThrottleMaxFraction != 0.5 || !strings.Contains(sum.ThrottledReason, "local/gpu0: power or thermal throttling 100%") {
		t.Errorf("throttled %v (bound %v) %q", sum.Throttled, sum.ThrottleMaxFraction, sum.ThrottledReason)
	}
}
