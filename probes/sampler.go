package probes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/load"
	"github.com/shirou/gopsutil/v4/mem"
)

// GPUSample is one gpu.jsonl line: one GPU at one instant.
type GPUSample struct {
	TsUs    int64   `json:"ts_us"` // wall clock µs since the Unix epoch
	Host    string  `json:"host"`
	GPU     int     `json:"gpu"` // NVML index
	UUID    string  `json:"uuid"`
	Name    string  `json:"name"`
	UtilGPU float64 `json:"util_gpu"` // %
	UtilMem float64 `json:"util_mem"` // % (memory controller busy)
	// MemUsedMiB is the memory allocated on the GPU, what nvidia-smi's
	// memory.used shows: nvmlDeviceGetMemoryInfo_v2's used, with the memory
	// the driver and firmware reserve in MemReservedMiB beside it. Where
	// the driver has no v2 call, it is the v1 call's used, which includes
	// the reserved memory (about 614 MiB on an H200 with driver 580), and
	// MemReservedMiB is absent (see memoryReader).
	MemUsedMiB     float64  `json:"mem_used_mib"`
	MemReservedMiB *float64 `json:"mem_reserved_mib,omitempty"`
	MemTotalMiB    float64  `json:"mem_total_mib"`
	PowerW         float64  `json:"power_w"`
	// EnergyMJ is NVML's total-energy counter, mJ since the driver loaded
	// (Volta and later); absent where the GPU has none.
	EnergyMJ        *uint64 `json:"energy_mj,omitempty"`
	SMClockMHz      float64 `json:"sm_clock_mhz"`
	TempC           float64 `json:"temp_c"`
	ThrottleReasons uint64  `json:"throttle_reasons"` // NVML clocks-throttle bitmask
	// Procs are the processes NVML lists on the GPU (compute and graphics).
	Procs []GPUProc `json:"procs,omitempty"`
	// Events are the XID and ECC events read in this round.
	Events []GPUEvent `json:"events,omitempty"`
	// ECCCorrected and ECCUncorrected are NVML's volatile ECC error counts
	// (since the driver loaded); absent where ECC counters are unsupported.
	ECCCorrected   *uint64 `json:"ecc_corrected,omitempty"`
	ECCUncorrected *uint64 `json:"ecc_uncorrected,omitempty"`
	// Err lists the readings NVML refused ("power: ERROR_NOT_SUPPORTED");
	// those fields are 0.
	Err string `json:"err,omitempty"`
}

// HostSample is one host.jsonl line.
type HostSample struct {
	TsUs        int64   `json:"ts_us"`
	Host        string  `json:"host"`
	CPUPct      float64 `json:"cpu_pct"` // all cores busy %, over the last interval
	MemUsedMiB  float64 `json:"mem_used_mib"`
	MemTotalMiB float64 `json:"mem_total_mib"`
	Load1       float64 `json:"load1"`
}

// DefaultInterval is the default sampling interval.
const DefaultInterval = 250 * time.Millisecond

// Sampler samples every GPU (through NVML) and the host (/proc on Linux,
// gopsutil elsewhere) at a fixed interval. With a nil library it samples the
// host only. A Sampler is used by one goroutine at a time.
type Sampler struct {
	lib      nvml.Interface
	host     string
	interval time.Duration
	clock    Clock
	devs     []gpuDev
	lastCPU  cpuTimes
	procStat procFile
	procMem  procFile
	procLoad procFile
	haveCPU  bool
	buf      []byte
	rounds   int64
	procRoot string      // "/proc"; tests point it elsewhere
	events   *eventWatch // nil: XID/ECC events off
	// EventsNote says why XID/ECC events are (partly) off, once Run began.
	EventsNote string
}

// Rounds returns the number of sampling rounds taken so far.
func (s *Sampler) Rounds() int64 { return s.rounds }

type gpuDev struct {
	index      int
	dev        nvml.Device
	uuid, name string
	ecc        bool // volatile ECC counters readable
	energy     bool // the total-energy counter readable
	mem        memoryReader
}

// NewSampler returns a sampler; interval ≤ 0 means DefaultInterval and a
// nil clock the system clock.
func NewSampler(lib nvml.Interface, host string, interval time.Duration, clock Clock) *Sampler {
	return &Sampler{lib: lib, host: host, interval: orPositive(interval, DefaultInterval), clock: orSystem(clock), procRoot: "/proc"}
}

// discover lists the GPUs once; their names and UUIDs do not change.
func (s *Sampler) discover() error {
	if s.lib == nil || s.devs != nil {
		return nil
	}
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("nvml: device count: %s", returnName(ret))
	}
	s.devs = make([]gpuDev, 0, n)
	for i := 0; i < n; i++ {
		d, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml: handle of GPU %d: %s", i, returnName(ret))
		}
		g := gpuDev{index: i, dev: d}
		g.uuid, _ = d.GetUUID()
		g.name, _ = d.GetName()
		_, ret = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		g.ecc = ret == nvml.SUCCESS
		_, ret = d.GetTotalEnergyConsumption()
		g.energy = ret == nvml.SUCCESS
		g.mem = newMemoryReader(s.lib, d)
		s.devs = append(s.devs, g)
	}
	return nil
}

// SampleGPUs reads every GPU once. It returns nil without a library.
func (s *Sampler) SampleGPUs() ([]GPUSample, error) {
	if err := s.discover(); err != nil {
		return nil, err
	}
	out := make([]GPUSample, 0, len(s.devs))
	for _, g := range s.devs {
		out = append(out, s.sampleGPU(g))
	}
	return out, nil
}

func (s *Sampler) sampleGPU(g gpuDev) GPUSample {
	x := GPUSample{TsUs: s.clock.Now().UnixMicro(), Host: s.host, GPU: g.index, UUID: g.uuid, Name: g.name}
	var errs []string
	fail := func(what string, ret nvml.Return) {
		errs = append(errs, what+": "+returnName(ret))
	}
	if u, ret := g.dev.GetUtilizationRates(); ret == nvml.SUCCESS {
		x.UtilGPU, x.UtilMem = float64(u.Gpu), float64(u.Memory)
	} else {
		fail("utilization", ret)
	}
	if ret := g.mem.read(g.dev, &x); ret != nvml.SUCCESS {
		fail("memory", ret)
	}
	if p, ret := g.dev.GetPowerUsage(); ret == nvml.SUCCESS {
		x.PowerW = float64(p) / 1000
	} else {
		fail("power", ret)
	}
	if g.energy {
		if e, ret := g.dev.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
			x.EnergyMJ = &e
		} else {
			fail("energy", ret)
		}
	}
	if c, ret := g.dev.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		x.SMClockMHz = float64(c)
	} else {
		fail("sm_clock", ret)
	}
	if t, ret := g.dev.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		x.TempC = float64(t)
	} else {
		fail("temperature", ret)
	}
	if r, ret := g.dev.GetCurrentClocksThrottleReasons(); ret == nvml.SUCCESS {
		x.ThrottleReasons = r
	} else {
		fail("throttle_reasons", ret)
	}
	if procs, err := gpuProcs(g.dev, s.procRoot); err == nil {
		x.Procs = procs
	} else {
		errs = append(errs, err.Error())
	}
	if g.ecc {
		c, r1 := g.dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
		u, r2 := g.dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		if r1 == nvml.SUCCESS && r2 == nvml.SUCCESS {
			x.ECCCorrected, x.ECCUncorrected = &c, &u
		}
	}
	x.Err = strings.Join(errs, "; ")
	return x
}

// SampleHost reads host CPU (busy % since the previous call; 0 on the first)
// and memory.
func (s *Sampler) SampleHost(ctx context.Context) (HostSample, error) {
	h := HostSample{TsUs: s.clock.Now().UnixMicro(), Host: s.host}
	if s.procStat.path == "" {
		s.procStat.path, s.procMem.path, s.procLoad.path = "/proc/stat", "/proc/meminfo", "/proc/loadavg"
	}
	mb, err := s.procMem.read()
	if errors.Is(err, fs.ErrNotExist) { // no /proc: gopsutil
		vm, err := mem.VirtualMemoryWithContext(ctx)
		if err != nil {
			return h, fmt.Errorf("host memory: %w", err)
		}
		h.MemUsedMiB, h.MemTotalMiB = float64(vm.Used)/(1<<20), float64(vm.Total)/(1<<20)
		if la, err := load.AvgWithContext(ctx); err == nil {
			h.Load1 = la.Load1
		}
		if pct, err := cpu.PercentWithContext(ctx, 0, false); err == nil && len(pct) == 1 {
			h.CPUPct = pct[0] // busy since the previous call (0 interval)
		}
		return h, nil
	}
	if err != nil {
		return h, fmt.Errorf("host memory: %w", err)
	}
	total, avail, err := parseMeminfo(mb)
	if err != nil {
		return h, err
	}
	h.MemTotalMiB, h.MemUsedMiB = float64(total)/1024, float64(total-min(avail, total))/1024
	sb, err := s.procStat.read()
	if err != nil {
		return h, fmt.Errorf("host cpu: %w", err)
	}
	ct, err := parseCPUStat(sb)
	if err != nil {
		return h, err
	}
	if s.haveCPU {
		h.CPUPct = busyPct(s.lastCPU, ct)
	}
	s.lastCPU, s.haveCPU = ct, true
	if lb, err := s.procLoad.read(); err == nil {
		h.Load1, _ = parseLoadavg(lb)
	}
	return h, nil
}

// Close releases the /proc files the host sampler keeps open and the NVML
// event set.
func (s *Sampler) Close() {
	s.events.close()
	s.events = nil
	s.procStat.close()
	s.procMem.close()
	s.procLoad.close()
}

// Run samples until ctx is done: GPUs at once and on every tick to gpuW,
// the host on every tick to hostW (CPU % is averaged over the interval).
// A nil writer turns that stream off. It returns nil when ctx ends, or the
// first NVML discovery or write error.
func (s *Sampler) Run(ctx context.Context, gpuW, hostW io.Writer) error {
	defer s.Close()
	if err := s.discover(); err != nil {
		return err
	}
	if gpuW != nil && s.lib != nil && s.events == nil {
		s.events, s.EventsNote = openEvents(s.lib, s.devs)
	}
	if hostW != nil {
		if _, err := s.SampleHost(ctx); err != nil { // CPU baseline
			return err
		}
	}
	t := s.clock.NewTicker(s.interval)
	defer t.Stop()
	for first := true; ; first = false {
		if err := s.Tick(ctx, gpuW, hostW, !first); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// Tick takes one round of samples: GPUs to gpuW, and, when host is true,
// the host to hostW. Each stream gets one Write per round.
func (s *Sampler) Tick(ctx context.Context, gpuW, hostW io.Writer, host bool) error {
	s.rounds++
	if gpuW != nil && s.lib != nil {
		gs, err := s.SampleGPUs()
		if err != nil {
			return err
		}
		if s.events != nil && len(gs) > 0 {
			s.events.drain(gs, gs[len(gs)-1].TsUs)
		}
		s.buf = s.buf[:0]
		for i := range gs {
			s.buf = appendJSONLine(s.buf, &gs[i])
		}
		if _, err := gpuW.Write(s.buf); err != nil {
			return fmt.Errorf("gpu samples: %w", err)
		}
	}
	if host && hostW != nil {
		h, err := s.SampleHost(ctx)
		if err != nil {
			return err
		}
		s.buf = appendJSONLine(s.buf[:0], &h)
		if _, err := hostW.Write(s.buf); err != nil {
			return fmt.Errorf("host samples: %w", err)
		}
	}
	return nil
}

func appendJSONLine(buf []byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil { // cannot happen for these flat structs
		return buf
	}
	return append(append(buf, b...), '\n')
}
