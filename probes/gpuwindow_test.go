package probes

import (
	"context"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// startSleeper starts `sleep 60` in a process group of its own inside the
// test's session: a process that is not the engine's.
func startSleeper(t *testing.T) int {
	t.Helper()
	c := exec.Command("sleep", "60")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c.Process.Pid
}

// startEngine starts a stand-in engine as mbench does (a session leader):
// a shell whose child `sleep` left the session with setsid, as a worker
// that detaches would. It returns both pids once the child's setsid is done.
func startEngine(t *testing.T) (engine, detached int) {
	t.Helper()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid command")
	}
	c := exec.Command("sh", "-c", "setsid sleep 60 & echo $!; wait")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Skipf("cannot start sh: %v", err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	var line [32]byte
	n, _ := out.Read(line[:])
	detached, err = strconv.Atoi(strings.TrimSpace(string(line[:n])))
	if err != nil {
		t.Fatalf("child pid %q: %v", line[:n], err)
	}
	t.Cleanup(func() { syscall.Kill(detached, syscall.SIGKILL) })
	for { // the event itself: the child is its own session's leader
		st, err := readProcStat("/proc", detached)
		if err != nil {
			t.Fatal(err)
		}
		if st.session == detached && st.comm == "sleep" {
			return c.Process.Pid, detached
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSamplerWindowOnMock runs the sampler over five rounds of go-nvml's
// 8×H200 mock with real processes listed by NVML (their names and groups
// come from /proc), a thermal slowdown, a power cap, an XID event and rising
// ECC counters, and checks the run summary against what was scripted.
func TestSamplerWindowOnMock(t *testing.T) {
	enginePid, detachedPid := startEngine(t) // the engine and a worker that left its session
	foreignPid := startSleeper(t)            // anyone else
	const hiddenPid = 4_000_000_000          // beyond pid_max: not visible in /proc
	var tick atomic.Int64
	lib := mockH200(new(int))
	proc := func(pid int, mib uint64) nvml.ProcessInfo {
		return nvml.ProcessInfo{Pid: uint32(pid), UsedGpuMemory: mib << 20}
	}
	for i, d := range lib.Devices {
		dev := d.(*server.Device)
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			k := tick.Load()
			switch {
			case i == 2: // the engine's worker all along
				return []nvml.ProcessInfo{proc(enginePid, 70000)}, nvml.SUCCESS
			case i == 5 && (k == 1 || k == 2): // a foreign load for two rounds
				return []nvml.ProcessInfo{proc(foreignPid, 1130)}, nvml.SUCCESS
			case i == 7:
				return []nvml.ProcessInfo{proc(detachedPid, 500)}, nvml.SUCCESS
			case i == 6 && k == 4:
				return []nvml.ProcessInfo{{Pid: hiddenPid, UsedGpuMemory: math.MaxUint64}}, nvml.SUCCESS
			}
			return nil, nvml.SUCCESS
		}
		dev.GetClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) {
			if k := tick.Load(); i == 3 && (k == 1 || k == 2) {
				return 1400, nvml.SUCCESS // what the slowdown cost
			}
			return 1980, nvml.SUCCESS
		}
		dev.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) {
			k := tick.Load()
			switch {
			case i == 3 && (k == 1 || k == 2): // 2 of 4 intervals
				return nvml.ClocksThrottleReasonHwThermalSlowdown, nvml.SUCCESS
			case i == 1 && k >= 1: // 3 of 4 intervals, at full clock: costs nothing
				return nvml.ClocksThrottleReasonSwPowerCap, nvml.SUCCESS
			case i == 4 && k == 4: // the last sample holds no interval
				return nvml.ClocksThrottleReasonSwPowerCap, nvml.SUCCESS
			case i == 0 && k == 0: // 1 of 4 intervals: under the bound
				return nvml.ClocksThrottleReasonSwPowerCap, nvml.SUCCESS
			}
			return nvml.ClocksThrottleReasonGpuIdle, nvml.SUCCESS
		}
		if i == 1 { // ECC counters: 2 corrected errors a round
			dev.GetTotalEccErrorsFunc = func(typ nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
				if typ == nvml.MEMORY_ERROR_TYPE_CORRECTED {
					return uint64(2 * tick.Load()), nvml.SUCCESS
				}
				return 0, nvml.SUCCESS
			}
		}
	}
	xidSent := false
	lib.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				if tick.Load() == 3 && !xidSent {
					xidSent = true
					return nvml.EventData{Device: lib.Devices[6], EventType: nvml.EventTypeXidCriticalError, EventData: 79}, nvml.SUCCESS
				}
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}

	clock := newFakeClock(false)
	s := NewSampler(lib, "h200", 0, clock)
	var gpuOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx, &gpuOut, nil) }()
	clock.waitTicker(1)
	for k := int64(1); k <= 4; k++ {
		for int64(strings.Count(gpuOut.String(), "\n")) < 8*k { // round k-1 written
			time.Sleep(time.Millisecond)
		}
		tick.Store(k)
		clock.Tick(DefaultInterval)
	}
	for strings.Count(gpuOut.String(), "\n") < 8*5 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	samples, err := ReadGPUSamples(strings.NewReader(gpuOut.String()))
	if err != nil {
		t.Fatal(err)
	}
	sum := SummarizeGPUWith(samples, GPUSummaryOptions{
		Owner: EngineGroups{"h200": {enginePid}}, ThrottleMaxFraction: 0.3,
	})
	if len(sum.PerGPU) != 8 || sum.PerGPU[0].N != 5 {
		t.Fatalf("summary of %d GPUs, %d samples each; want 8 and 5", len(sum.PerGPU), sum.PerGPU[0].N)
	}
	g := sum.PerGPU

	// Processes: the engine's worker is its own; the sleeper in the test's
	// session and the pid /proc cannot see are foreign.
	if len(g[2].OwnProcs) != 1 || g[2].OwnProcs[0].Pid != enginePid || g[2].OwnProcs[0].Name != "sh" ||
		g[2].OwnProcs[0].Sid != enginePid || len(g[2].ForeignProcs) != 0 {
		t.Errorf("GPU 2: own %+v foreign %+v; want the engine's pid %d only", g[2].OwnProcs, g[2].ForeignProcs, enginePid)
	}
	if o := g[7].OwnProcs; len(o) != 1 || o[0].Pid != detachedPid || o[0].Sid != detachedPid || len(g[7].ForeignProcs) != 0 {
		t.Errorf("GPU 7: own %+v foreign %+v; want the detached worker %d, owned by descent", o, g[7].ForeignProcs, detachedPid)
	}
	f := g[5].ForeignProcs
	if len(f) != 1 || f[0].Pid != foreignPid || f[0].Name != "sleep" || f[0].Pgid != foreignPid || f[0].MaxUsedMiB != 1130 ||
		f[0].Samples != 2 || f[0].LastTsUs-f[0].FirstTsUs != DefaultInterval.Microseconds() {
		t.Errorf("GPU 5 foreign %+v; want pid %d in 2 samples one interval apart", f, foreignPid)
	}
	if h := g[6].ForeignProcs; len(h) != 1 || h[0].Pid != hiddenPid || h[0].Name != "" || h[0].MaxUsedMiB != 0 {
		t.Errorf("GPU 6 foreign %+v; want the invisible pid with unknown memory", h)
	}
	if !sum.Contended || !strings.Contains(sum.ContendedReason, "h200/gpu5: pid "+strconv.Itoa(foreignPid)+" (sleep, up to 1130 MiB)") ||
		!strings.Contains(sum.ContendedReason, "h200/gpu6: pid 4000000000 (not visible from this PID namespace") {
		t.Errorf("contended %v %q", sum.Contended, sum.ContendedReason)
	}

	// Throttling, with each interval counted at its first sample's state.
	for _, tc := range []struct {
		gpu       int
		got, want float64
	}{
		{3, g[3].Throttle.HWThermal, 0.5}, {3, g[3].Throttle.ThermalOrPower, 0.5}, {3, g[3].Throttle.GPUIdle, 0.5},
		{4, g[4].Throttle.SWPowerCap, 0}, {4, g[4].Throttle.GPUIdle, 1},
		{0, g[0].Throttle.SWPowerCap, 0.25}, {0, g[0].Throttle.ThermalOrPower, 0.25},
	} {
		if tc.got != tc.want {
			t.Errorf("GPU %d: fraction %v, want %v (%+v)", tc.gpu, tc.got, tc.want, g[tc.gpu].Throttle)
		}
	}
	if l := g[3].Throttle.ClockLoss; l == nil || math.Abs(*l-0.5*(1-1400.0/1980)) > 1e-12 || g[3].Throttle.UnthrottledClockMHz != 1980 {
		t.Errorf("GPU 3 clock loss %v of %v MHz; want half the window at 1400 of 1980 MHz", l, g[3].Throttle.UnthrottledClockMHz)
	}
	if l := g[1].Throttle.ClockLoss; g[1].Throttle.SWPowerCap != 0.75 || l == nil || *l != 0 {
		t.Errorf("GPU 1 power cap %v, clock loss %v; want 0.75 at no cost", g[1].Throttle.SWPowerCap, l)
	}
	const want = "h200/gpu3: power or thermal throttling 50% of the window (hw_thermal_slowdown 50%) > 30%, " +
		"costing 14.6% of the unthrottled 1980 MHz SM clock over the window"
	if !sum.Throttled || sum.ThrottledReason != want {
		t.Errorf("throttled %v %q; want GPU 3 alone (GPU 1's power cap cost no clock)", sum.Throttled, sum.ThrottledReason)
	}

	// Hardware events: one XID on GPU 6, and 8 corrected ECC errors on GPU 1.
	if ev := g[6].Events; len(ev) != 1 || ev[0].Kind != EventXid || ev[0].Data != 79 || ev[0].TsUs != samples[3*8].TsUs {
		t.Errorf("GPU 6 events %+v; want XID 79 in round 3", ev)
	}
	if g[1].ECCCorrectedNew != 8 || g[1].ECCUncorrectedNew != 0 || g[0].ECCCorrectedNew != 0 || sum.HardwareEvents != 9 {
		t.Errorf("ECC: GPU 1 +%d/+%d, hardware events %d; want +8/+0 and 9", g[1].ECCCorrectedNew, g[1].ECCUncorrectedNew, sum.HardwareEvents)
	}
	if s.EventsNote != "" {
		t.Errorf("events note %q, want none (every mock GPU registers)", s.EventsNote)
	}
}

// TestThrottleFractionsIrregular: intervals of different lengths weigh by
// their length; one instant falls back to the share of samples.
func TestThrottleFractionsIrregular(t *testing.T) {
	at := func(ts int64, r uint64) GPUSample { return GPUSample{TsUs: ts, ThrottleReasons: r} }
	pc, th := uint64(nvml.ClocksThrottleReasonSwPowerCap), uint64(nvml.ClocksThrottleReasonSwThermalSlowdown)
	for _, tc := range []struct {
		name                string
		ss                  []GPUSample
		power, thermal, any float64
	}{
		// 0–100 µs power cap, 100–400 thermal and power, 400–1000 nothing.
		{"irregular", []GPUSample{at(0, pc), at(100, pc|th), at(400, 0), at(1000, pc|th)}, 0.4, 0.3, 0.4},
		{"one sample", []GPUSample{at(5, th)}, 0, 1, 1},
		{"one instant", []GPUSample{at(5, th), at(5, 0), at(5, pc), at(5, 0)}, 0.25, 0.25, 0.5},
	} {
		f := throttleFractions(tc.ss)
		if f.SWPowerCap != tc.power || f.SWThermal != tc.thermal || f.ThermalOrPower != tc.any {
			t.Errorf("%s: %+v; want power %v thermal %v any %v", tc.name, f, tc.power, tc.thermal, tc.any)
		}
	}
}

// TestThrottleClockCost: power or thermal throttling over the bound marks a
// run only where it cost the GPU more than ThrottleMinClockLoss of its SM
// clock against the fastest sample under no such reason, or where no sample
// was free of one to compare with.
func TestThrottleClockCost(t *testing.T) {
	pc := uint64(nvml.ClocksThrottleReasonSwPowerCap)
	at := func(ts int64, r uint64, mhz float64) GPUSample {
		return GPUSample{Host: "h", TsUs: ts, ThrottleReasons: r, SMClockMHz: mhz}
	}
	for _, tc := range []struct {
		name   string
		ss     []GPUSample
		loss   float64 // -1: unknown
		reason string
	}{
		{"at full clock", []GPUSample{at(0, 0, 1980), at(1, pc, 1980), at(2, pc, 1980), at(3, 0, 1980)}, 0, ""},
		// 2 of 3 intervals at 1960 of 1980 MHz: 0.67% of the clock.
		{"shallow", []GPUSample{at(0, pc, 1960), at(1, pc, 1960), at(2, 0, 1980), at(3, 0, 1980)}, 2.0 / 3 * 20 / 1980, ""},
		// 2 of 3 intervals at 1485 of 1980: 16.7% of the clock.
		{"deep", []GPUSample{at(0, 0, 1980), at(1, pc, 1485), at(2, pc, 1485), at(3, 0, 1700)}, 2.0 / 3 * 0.25,
			"h/gpu0: power or thermal throttling 67% of the window (sw_power_cap 67%) > 10%, costing 16.7% of the unthrottled 1980 MHz SM clock over the window"},
		{"every sample", []GPUSample{at(0, pc, 1980), at(1, pc, 1980), at(2, pc, 1980)}, -1,
			"h/gpu0: power or thermal throttling 100% of the window (sw_power_cap 100%) > 10%, no unthrottled sample to measure its cost in SM clock"},
	} {
		sum := SummarizeGPU(tc.ss)
		th := sum.PerGPU[0].Throttle
		if l := th.ClockLoss; (tc.loss < 0) != (l == nil) || l != nil && math.Abs(*l-tc.loss) > 1e-12 {
			t.Errorf("%s: clock loss %v, want %v", tc.name, l, tc.loss)
		}
		if sum.Throttled != (tc.reason != "") || sum.ThrottledReason != tc.reason {
			t.Errorf("%s: throttled %v %q, want %q", tc.name, sum.Throttled, sum.ThrottledReason, tc.reason)
		}
	}
}

// TestThrottleOnRealH100: a vLLM 0.26.0 run on an H100 (gpu/vllm, the sweep
// of 2026-12-06) reported sw_power_cap in 40% of its window at 260-430 W of
// a 700 W part, its SM clock 1% below the unthrottled 1980 MHz on average
// (dips to 1815 MHz): the rule of fractions alone marked every run of that
// sweep throttled; what it cost is 0.4% of the clock, under the bound.
func TestThrottleOnRealH100(t *testing.T) {
	samples, err := ReadGPUSamples(strings.NewReader(readTestdata(t, "h100_vllm_sw_power_cap.jsonl")))
	if err != nil {
		t.Fatal(err)
	}
	sum := SummarizeGPU(samples)
	th := sum.PerGPU[0].Throttle
	if th.SWPowerCap < 0.3 || th.ClockLoss == nil || *th.ClockLoss <= 0 || *th.ClockLoss > ThrottleMinClockLoss || th.UnthrottledClockMHz != 1980 {
		t.Errorf("sw_power_cap %.2f, clock loss %v of %v MHz; want > 0.3 of the window at a cost in (0, %v]",
			th.SWPowerCap, th.ClockLoss, th.UnthrottledClockMHz, ThrottleMinClockLoss)
	}
	if sum.Throttled {
		t.Errorf("marked throttled: %s", sum.ThrottledReason)
	}
}

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want procStat
		ok   bool
	}{
		{"947 (python3) S 1 427 427 0 -1 4194560 ...", procStat{comm: "python3", ppid: 1, pgrp: 427, session: 427, state: 'S'}, true},
		{"12 (a) b) (c) R 2 12 7 0", procStat{comm: "a) b) (c", ppid: 2, pgrp: 12, session: 7, state: 'R'}, true}, // comm holds ") ("
		{"12 (VLLM::Worker TP0) S 11 11 11", procStat{comm: "VLLM::Worker TP0", ppid: 11, pgrp: 11, session: 11, state: 'S'}, true},
		{"12 python3 S 1 2 3", procStat{}, false},
		{"12 (x) S 1", procStat{}, false},
		{"12 (x) S 1 pg 3", procStat{}, false},
		{"12 (x) S p 2 3", procStat{}, false},
	} {
		got, err := parseProcStat([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("947 (python3) S 1 427 427 0 -1"))
	f.Add([]byte("1 ((() R 1 2 3"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseProcStat(b)
		if err == nil && !strings.Contains(string(b), "("+st.comm+")") {
			t.Fatalf("comm %q is not between parentheses in %q", st.comm, b)
		}
	})
}
