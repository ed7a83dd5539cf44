package probes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// mockH200 is go-nvml's 8×H200 mock with the readings the sampler uses
// filled in: GPU i at tick k reports util 10i+k %, (1+i) GiB allocated and
// h200ReservedMiB reserved by the driver — the v1 memory call's used is their
// sum, the v2 call's used the allocated part with reserved beside it, as on
// the real H200 (see h200ReservedMiB) —, power (100+10i) W, SM clock 1980
// MHz, temperature 30+i °C, and a total-energy counter of k·250·(120+10i) mJ
// — 20 W more than its power reading, for 250 ms a tick: the counter and the
// power disagree, as an averaged power reading and the true energy do under
// a load step. GPU 7 does not support power readings, GPU 6 has no energy
// counter, GPU 5 answers the v2 memory call with ERROR_NOT_SUPPORTED.
func mockH200(tick *int) *server.Server {
	s := dgxh200.New()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		allocated, reserved := uint64(1+i)<<30, uint64(h200ReservedMiB)<<20
		dev.MemoryInfo.Used = allocated + reserved
		dev.MemoryInfo.Free = dev.MemoryInfo.Total - dev.MemoryInfo.Used
		dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			if i == 5 {
				return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED
			}
			total := dev.MemoryInfo.Total
			return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: total,
				Reserved: reserved, Used: allocated, Free: total - reserved - allocated}, nvml.SUCCESS
		}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10*i + *tick), Memory: uint32(i)}, nvml.SUCCESS
		}
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) {
			if i == 7 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return uint32(100+10*i) * 1000, nvml.SUCCESS
		}
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
			if i == 6 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return uint64(*tick) * 250 * uint64(120+10*i), nvml.SUCCESS
		}
		dev.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			if c != nvml.CLOCK_SM {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return 1980, nvml.SUCCESS
		}
		dev.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
			return uint32(30 + i), nvml.SUCCESS
		}
		dev.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) {
			return nvml.ClocksThrottleReasonGpuIdle, nvml.SUCCESS
		}
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		dev.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		dev.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			return nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError | nvml.EventTypePState, nvml.SUCCESS
		}
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_TIMEOUT },
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return s
}

// h200ReservedMiB is the memory the driver of an H200 reserves for itself
// (driver 580.159.04): on an idle H200 the v1 memory call read 615 MiB used
// while nvidia-smi's memory.used read 0, and with llama-server loaded v1 read
// 614–615 MiB above nvidia-smi over the same window in every run.
const h200ReservedMiB = 615

// TestMemoryInfoV1WhereNoV2: where the loaded NVML has no
// nvmlDeviceGetMemoryInfo_v2 the sampler never calls it (a missing symbol
// would kill the process) and reads v1 — used includes the reserved memory,
// none is reported —, and the summary says so.
func TestMemoryInfoV1WhereNoV2(t *testing.T) {
	lib := mockH200(new(int))
	lib.LookupSymbolFunc = func(sym string) error {
		if sym == memInfoV2Symbol {
			return errors.New("symbol not found")
		}
		return nil
	}
	for _, d := range lib.Devices {
		d.(*server.Device).GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			panic("GetMemoryInfo_v2 called although NVML lacks it")
		}
	}
	gpus, err := NewSampler(lib, "h200", 0, newFakeClock(false)).SampleGPUs()
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range gpus {
		if want := float64(1+i)*1024 + h200ReservedMiB; g.MemUsedMiB != want || g.MemReservedMiB != nil || strings.Contains(g.Err, "memory") {
			t.Errorf("GPU %d: used %v reserved %v err %q; want %v (v1, reserved included), none reserved", i, g.MemUsedMiB, g.MemReservedMiB, g.Err, want)
		}
	}
	for i, g := range SummarizeGPU(gpus).PerGPU {
		if g.MemSource != MemFromV1 || g.MemReserved != nil {
			t.Errorf("GPU %d: memory from %q reserved %+v; want %q and none", i, g.MemSource, g.MemReserved, MemFromV1)
		}
	}
}

// A v2 call that fails after discovery is the sample's error, not a silent
// switch to v1: a run's samples keep one meaning.
func TestMemoryInfoV2ErrorNotMixed(t *testing.T) {
	lib := mockH200(new(int))
	s := NewSampler(lib, "h200", 0, newFakeClock(false))
	if _, err := s.SampleGPUs(); err != nil {
		t.Fatal(err)
	}
	dev := lib.Devices[0].(*server.Device)
	dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_GPU_IS_LOST }
	gpus, err := s.SampleGPUs()
	if err != nil {
		t.Fatal(err)
	}
	if g := gpus[0]; g.MemUsedMiB != 0 || g.MemReservedMiB != nil || g.Err != "memory: ERROR_GPU_IS_LOST" {
		t.Errorf("GPU 0 after a failed v2 read: used %v reserved %v err %q; want 0, none, the error", g.MemUsedMiB, g.MemReservedMiB, g.Err)
	}
	if n := len(dev.GetMemoryInfoCalls()); n != 0 {
		t.Errorf("v1 memory call made %d times on a GPU that answers v2", n)
	}
}

// syncBuffer is a bytes.Buffer safe for a writing goroutine and the test;
// with wrote set, each Write is also signalled on it, so a test can wait
// on the write itself.
type syncBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	n, err := s.b.Write(p)
	s.mu.Unlock()
	if s.wrote != nil {
		s.wrote <- struct{}{}
	}
	return n, err
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestSamplerAgainstMock(t *testing.T) {
	tick := 0
	lib := mockH200(&tick)
	clock := newFakeClock(false)
	s := NewSampler(lib, "h200", 0, clock)
	var gpuOut, hostOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx, &gpuOut, &hostOut) }()
	clock.waitTicker(1)
	for k := 1; k <= 3; k++ {
		for strings.Count(gpuOut.String(), "\n") < 8*k { // round k-1 written
			time.Sleep(time.Millisecond)
		}
		tick = k
		clock.Tick(DefaultInterval)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	gpus, hosts, err := ReadProbeStream(strings.NewReader(gpuOut.String() + hostOut.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 4*8 || len(hosts) != 3 {
		t.Fatalf("%d GPU samples, %d host samples; want 32 and 3", len(gpus), len(hosts))
	}
	t0 := clock.Now().Add(-3 * DefaultInterval).UnixMicro()
	reserved := float64(h200ReservedMiB)
	for n, g := range gpus {
		k, i := n/8, n%8
		want := GPUSample{
			TsUs: t0 + int64(k)*DefaultInterval.Microseconds(), Host: "h200", GPU: i,
			UUID: lib.Devices[i].(*server.Device).UUID, Name: "NVIDIA H200 141GB HBM3e",
			UtilGPU: float64(10*i + k), UtilMem: float64(i), MemUsedMiB: float64(1+i) * 1024,
			MemReservedMiB: &reserved, MemTotalMiB: 144384, PowerW: float64(100 + 10*i), SMClockMHz: 1980,
			TempC: float64(30 + i), ThrottleReasons: nvml.ClocksThrottleReasonGpuIdle,
		}
		if i == 5 { // no v2 memory call: v1's used, reserved included and not reported
			want.MemUsedMiB, want.MemReservedMiB = float64(1+i)*1024+h200ReservedMiB, nil
		}
		if i == 7 {
			want.PowerW, want.Err = 0, "power: ERROR_NOT_SUPPORTED"
		}
		if i != 6 {
			e := uint64(k) * 250 * uint64(120+10*i)
			want.EnergyMJ = &e
		}
		if !reflect.DeepEqual(g, want) {
			t.Fatalf("sample %d:\n got %+v\nwant %+v", n, g, want)
		}
	}
	// Energy over the 0.75 s the samples span: the counter's rise where the
	// GPU has one, marked so; power integrated (marked as the fallback)
	// on GPU 6; the integral beside it always.
	for i, g := range SummarizeGPU(gpus).PerGPU {
		integrated := float64(100+10*i) * 0.75
		if i == 7 {
			integrated = 0
		}
		want, src := float64(120+10*i)*0.75, EnergyFromCounter
		if i == 6 {
			want, src = integrated, EnergyFromPower
		}
		if !closeTo(g.EnergyJ, want, 1e-9) || g.EnergySource != src || !closeTo(g.EnergyIntegratedJ, integrated, 1e-9) {
			t.Errorf("GPU %d: energy %v J from %s (integrated %v); want %v from %s (integrated %v)", i, g.EnergyJ, g.EnergySource, g.EnergyIntegratedJ, want, src, integrated)
		}
		// Memory: allocated, with reserved beside it, from the v2 call;
		// GPU 5 falls back to v1 (reserved included, none reported).
		mem, res, memSrc := float64(1+i)*1024, &Stat{Mean: reserved, Min: reserved, Max: reserved}, MemFromV2
		if i == 5 {
			mem, res, memSrc = mem+h200ReservedMiB, nil, MemFromV1
		}
		if g.MemUsed != (Stat{Mean: mem, Min: mem, Max: mem}) || !reflect.DeepEqual(g.MemReserved, res) || g.MemSource != memSrc {
			t.Errorf("GPU %d: memory used %+v reserved %+v from %q; want %v, %+v from %q", i, g.MemUsed, g.MemReserved, g.MemSource, mem, res, memSrc)
		}
	}
	for _, h := range hosts {
		if h.Host != "h200" || h.MemTotalMiB <= 0 || h.CPUPct < 0 || h.CPUPct > 100 {
			t.Errorf("host sample %+v", h)
		}
	}
}

// With no NVML library the sampler still writes host samples.
func TestSamplerHostOnly(t *testing.T) {
	clock := newFakeClock(false)
	s := NewSampler(nil, "cpu-only", time.Second, clock)
	var gpuOut, hostOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx, &gpuOut, &hostOut) }()
	clock.waitTicker(1)
	clock.Tick(time.Second)
	clock.Tick(time.Second) // returns once the first tick's round is done
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if gpuOut.String() != "" || strings.Count(hostOut.String(), "\n") != 2 {
		t.Fatalf("gpu %q host %q", gpuOut.String(), hostOut.String())
	}
}

func TestParseProcFiles(t *testing.T) {
	a, err := parseCPUStat([]byte("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := parseCPUStat([]byte("cpu  250 0 100 1000 50 0 0 0 30 0\n"))
	if got := busyPct(a, b); got != 50 { // busy 200 of 400 jiffies; guest not counted twice
		t.Errorf("busy %v, want 50", got)
	}
	if _, err := parseCPUStat([]byte("intr 1 2\n")); err == nil {
		t.Error("want error for a missing cpu line")
	}
	total, avail, err := parseMeminfo([]byte("MemTotal:       24684936 kB\nMemFree:  1 kB\nMemAvailable:   20000000 kB\n"))
	if err != nil || total != 24684936 || avail != 20000000 {
		t.Errorf("meminfo %d %d %v", total, avail, err)
	}
	if _, _, err := parseMeminfo([]byte("MemTotal: 5 kB\n")); err == nil {
		t.Error("want error without MemAvailable")
	}
	if l, err := parseLoadavg([]byte("0.59 0.40 0.30 1/150 4242\n")); err != nil || l != 0.59 {
		t.Errorf("loadavg %v %v", l, err)
	}
	// The files stay open and re-read fresh content.
	s := NewSampler(nil, "h", 0, nil)
	defer s.Close()
	for i := 0; i < 3; i++ {
		h, err := s.SampleHost(context.Background())
		if err != nil || h.MemTotalMiB <= 0 || h.MemUsedMiB <= 0 || h.MemUsedMiB > h.MemTotalMiB {
			t.Fatalf("host sample %+v %v", h, err)
		}
	}
}

// BenchmarkSamplerTick is one sampling round: 8 GPUs of the mock plus the
// host, encoded to JSON. The cpu%@10Hz metric is the share of one core a
// 10 Hz probe spends (target ≤ 1%); the real NVML calls are measured on the
// GPU host by timing `mbench probe --interval 100ms`.
func BenchmarkSamplerTick(b *testing.B) {
	tick := 0
	s := NewSampler(mockH200(&tick), "h200", 0, nil)
	ctx := context.Background()
	cpu0 := processCPU()
	for b.Loop() {
		if err := s.Tick(ctx, io.Discard, io.Discard, true); err != nil {
			b.Fatal(err)
		}
	}
	perTick := (processCPU() - cpu0).Seconds() / float64(b.N)
	b.ReportMetric(perTick*1e6, "cpu-µs/tick")
	b.ReportMetric(perTick*10*100, "cpu%@10Hz")
}

// BenchmarkSamplerTickNVML measures one round against the real NVML (it
// skips without a GPU), GPUs only, host only and both, in CPU time of this
// process per round, and converts it to the share of a core at 10 Hz.
func BenchmarkSamplerTickNVML(b *testing.B) {
	lib, closeLib, err := OpenNVML()
	if err != nil {
		b.Skip(err)
	}
	defer closeLib()
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		gpu, hostW io.Writer
	}{{"gpu", io.Discard, nil}, {"host", nil, io.Discard}, {"both", io.Discard, io.Discard}} {
		b.Run(tc.name, func(b *testing.B) {
			s := NewSampler(lib, "h", 0, nil)
			s.Tick(ctx, tc.gpu, tc.hostW, true) // discovery
			cpu0 := processCPU()
			for b.Loop() {
				if err := s.Tick(ctx, tc.gpu, tc.hostW, true); err != nil {
					b.Fatal(err)
				}
			}
			perTick := (processCPU() - cpu0).Seconds() / float64(b.N)
			b.ReportMetric(perTick*1e6, "cpu-µs/tick")
			b.ReportMetric(perTick*10*100, "cpu%@10Hz")
		})
	}
}
