package probes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// script returns a Read that yields readings[k] on the k-th call (the last
// one repeated), built from (mem, temp) pairs for GPU 0 and 1.
type reading struct {
	mem, temp [2]float64
	procs     [2][]GPUProc
	err       error
}

func scripted(rs []reading) (func(context.Context) ([]GPUSample, error), *int) {
	calls := 0
	return func(context.Context) ([]GPUSample, error) {
		r := rs[min(calls, len(rs)-1)]
		calls++
		if r.err != nil {
			return nil, r.err
		}
		var out []GPUSample
		for g := 0; g < 2; g++ {
			out = append(out, GPUSample{Host: "h", GPU: g, MemUsedMiB: r.mem[g], TempC: r.temp[g], Procs: r.procs[g]})
		}
		return out, nil
	}, &calls
}

func idle() reading { return reading{mem: [2]float64{500, 600}, temp: [2]float64{35, 36}} }

func TestGate(t *testing.T) {
	hot := func(t0, t1 float64) reading { r := idle(); r.temp = [2]float64{t0, t1}; return r }
	loaded := func(m float64) reading { r := idle(); r.mem[1] = m; return r }
	cooling := []reading{idle()} // baseline, then 45 °C cooling 1 °C per poll
	for temp := 45.0; temp >= 35; temp-- {
		cooling = append(cooling, hot(temp, 36))
	}
	for _, tc := range []struct {
		name      string
		rs        []reading // rs[0] is the baseline
		wantWait  time.Duration
		wantPolls int
		timedOut  bool
		reason    string
	}{
		{"already idle", []reading{idle(), idle()}, 0, 1, false, ""},
		{"within band and tolerance", []reading{idle(), {mem: [2]float64{1000, 1100}, temp: [2]float64{38, 33}}}, 0, 1, false, ""},
		{"memory drains", []reading{idle(), loaded(120000), loaded(80000), loaded(2000), idle()}, 3 * time.Second, 4, false, ""},
		{"cools down", cooling, 7 * time.Second, 8, false, ""}, // 45 → 38 °C: within 35 ± 3
		{"too cold is out of band too", []reading{idle(), hot(31, 36), idle()}, time.Second, 2, false, ""},
		{"read errors retried", []reading{idle(), {err: errors.New("nvml gone")}, idle()}, time.Second, 2, false, ""},
		{"never cools", []reading{idle(), hot(60, 36)}, 10 * time.Second, 11, true, "gpu0: temperature 60 °C outside baseline 35 ± 3 °C"},
		{"memory held", []reading{idle(), loaded(90000)}, 10 * time.Second, 11, true, "memory used 90000 MiB > idle 600 + 512 MiB"},
		{"foreign process leaves", []reading{idle(), foreign(idle(), 1), foreign(idle(), 1), idle()}, 2 * time.Second, 3, false, ""},
		{"foreign process with no memory stays", []reading{idle(), foreign(idle(), 0)}, 10 * time.Second, 11, true,
			"h/gpu0: foreign pid 4242 (python3, 0 MiB)"},
		{"engine process is not foreign", []reading{idle(), ownedNoMem()}, 0, 1, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read, _ := scripted(tc.rs)
			g := &Gate{Read: read, Clock: newFakeClock(true), Timeout: 10 * time.Second, Poll: time.Second, Owner: engine}
			if _, err := g.MeasureBaseline(context.Background()); err != nil {
				t.Fatal(err)
			}
			res, err := g.Wait(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Waited != tc.wantWait || res.Polls != tc.wantPolls || res.TimedOut != tc.timedOut {
				t.Fatalf("waited %v polls %d timed out %v (reason %q); want %v %d %v",
					res.Waited, res.Polls, res.TimedOut, res.Reason, tc.wantWait, tc.wantPolls, tc.timedOut)
			}
			if !strings.Contains(res.Reason, tc.reason) || (tc.reason == "" && res.Reason != "") {
				t.Errorf("reason %q, want %q", res.Reason, tc.reason)
			}
			if len(res.GPUs) != 2 || res.GPUs[0].BaseTempC != 35 || res.WaitedS != tc.wantWait.Seconds() {
				t.Errorf("state %+v", res)
			}
		})
	}
}

func TestGateEdges(t *testing.T) {
	// No baseline (no GPU): skipped at once.
	res, err := (&Gate{}).Wait(context.Background())
	if err != nil || !res.Skipped || res.Polls != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	// A GPU missing from the reading keeps the gate shut.
	read, _ := scripted([]reading{idle()})
	g := &Gate{Read: read, Clock: newFakeClock(true), Timeout: 2 * time.Second,
		Baseline: []GPUSample{{Host: "h", GPU: 0, MemUsedMiB: 500, TempC: 35}, {Host: "h", GPU: 5}}}
	res, _ = g.Wait(context.Background())
	if !res.TimedOut || !strings.Contains(res.Reason, "h/gpu5: missing") {
		t.Fatalf("%+v", res)
	}
	// Cancellation is an error, with the state so far.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	read, _ = scripted([]reading{idle(), hot2()})
	g = &Gate{Read: read, Clock: newFakeClock(false)}
	if _, err := g.MeasureBaseline(ctx); err != nil {
		t.Fatal(err) // the first reading is clean: no wait, no context check
	}
	if res, err := g.Wait(ctx); !errors.Is(err, context.Canceled) || res.Polls != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	// A baseline read that fails until the timeout is an error naming it.
	read, _ = scripted([]reading{{err: errors.New("boom")}})
	if _, err := (&Gate{Read: read, Clock: newFakeClock(true), Timeout: 3 * time.Second}).MeasureBaseline(context.Background()); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("want baseline error naming the read error, got %v", err)
	}
}

// engine owns process group 100 on host h.
var engine = EngineGroups{"h": {100}}

// foreign puts python3 (pid 4242, its own group) on GPU 0 with memory MiB
// more used.
func foreign(r reading, mib float64) reading {
	r.procs[0] = []GPUProc{{Pid: 4242, UsedMiB: mib, Name: "python3", Pgid: 4242, Sid: 4000}}
	r.mem[0] += mib
	return r
}

// own puts an engine worker (session 100, group 101) on GPU 1.
func own(r reading) reading {
	r.procs[1] = []GPUProc{{Pid: 101, UsedMiB: 70000, Name: "VLLM::Worker", Pgid: 101, Sid: 100}}
	r.mem[1] += 70000
	return r
}

// ownedNoMem is idle with an engine process listed on GPU 1 (its memory
// within the tolerance: the gate is about the process only).
func ownedNoMem() reading {
	r := own(idle())
	r.mem[1] = idle().mem[1]
	return r
}

// TestTakeBaseline: a baseline is taken only once no foreign process is on
// the GPUs; when one stays past the timeout its memory is subtracted, and
// the record says which way it was taken.
func TestTakeBaseline(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rs       []reading
		method   BaselineMethod
		polls    int
		mem0     float64 // baseline memory of GPU 0
		foreign  string
		foreignM float64
	}{
		{"clean", []reading{idle()}, BaselineClean, 1, 500, "", 0},
		{"waits for the foreign process to leave", []reading{foreign(idle(), 1754), foreign(idle(), 1754), idle()}, BaselineClean, 3, 500, "", 0},
		{"engine process does not hold it", []reading{own(idle())}, BaselineClean, 1, 500, "", 0},
		{"foreign stays: subtracted", []reading{foreign(idle(), 1754)}, BaselineForeignSubtracted, 6, 500, "h/gpu0: pid 4242 (python3, 1754 MiB)", 1754},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read, _ := scripted(tc.rs)
			g := &Gate{Read: read, Clock: newFakeClock(true), Timeout: 5 * time.Second, Poll: time.Second, Owner: engine}
			rec, err := g.MeasureBaseline(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rec.Method != tc.method || rec.Polls != tc.polls || rec.Kind != BaselineIdle {
				t.Errorf("record %+v; want method %q after %d polls", rec, tc.method, tc.polls)
			}
			if g.Baseline[0].MemUsedMiB != tc.mem0 || rec.GPUs[0].MemUsedMiB != tc.mem0 || rec.GPUs[0].ForeignMiB != tc.foreignM {
				t.Errorf("GPU 0 baseline %v MiB (record %+v), want %v with %v subtracted", g.Baseline[0].MemUsedMiB, rec.GPUs[0], tc.mem0, tc.foreignM)
			}
			if got := strings.Join(rec.Foreign, "; "); got != tc.foreign {
				t.Errorf("foreign %q, want %q", got, tc.foreign)
			}
		})
	}
}

// TestMeasureLoaded: the engine-loaded baseline keeps the idle temperatures
// and takes the memory the engine holds, without a foreign process's.
func TestMeasureLoaded(t *testing.T) {
	read, _ := scripted([]reading{idle(), foreign(own(idle()), 1754), own(idle())})
	g := &Gate{Read: read, Clock: newFakeClock(true), Timeout: 5 * time.Second, Poll: time.Second, Owner: engine}
	if _, err := g.MeasureBaseline(context.Background()); err != nil {
		t.Fatal(err)
	}
	hot := g.Baseline
	base, rec, err := g.MeasureLoaded(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Kind != BaselineEngineLoaded || rec.Method != BaselineClean || rec.Polls != 2 || rec.WaitedS != 1 {
		t.Errorf("record %+v", rec)
	}
	if base[0].MemUsedMiB != 500 || base[1].MemUsedMiB != 70600 || base[1].TempC != hot[1].TempC {
		t.Errorf("loaded baseline %+v", base)
	}
}

func hot2() reading { r := idle(); r.temp[0] = 70; return r }
