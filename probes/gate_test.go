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
			out = append(out, GPUSample{Host: "h", GPU: g, MemUsedMiB: r.mem[g], TempC: r.temp[g]})
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			read, _ := scripted(tc.rs)
			g := &Gate{Read: read, Clock: newFakeClock(true), Timeout: 10 * time.Second, Poll: time.Second}
			if err := g.MeasureBaseline(context.Background()); err != nil {
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
	g.MeasureBaseline(ctx)
	if res, err := g.Wait(ctx); !errors.Is(err, context.Canceled) || res.Polls != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	// A failing baseline read is an error.
	read, _ = scripted([]reading{{err: errors.New("boom")}})
	if err := (&Gate{Read: read}).MeasureBaseline(context.Background()); err == nil {
		t.Fatal("want baseline error")
	}
}

func hot2() reading { r := idle(); r.temp[0] = 70; return r }
