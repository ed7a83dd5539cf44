package probes

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
)

// Stat is the mean, min and max of one series.
type Stat struct {
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// GPUStat summarizes one GPU over a run.
type GPUStat struct {
	Host      string  `json:"host"`
	GPU       int     `json:"gpu"`
	UUID      string  `json:"uuid"`
	Name      string  `json:"name"`
	N         int     `json:"n"`          // samples
	DurationS float64 `json:"duration_s"` // last − first sample
	UtilGPU   Stat    `json:"util_gpu"`
	// MemUsed is the memory allocated on the GPU (nvidia-smi's
	// memory.used) where MemSource is MemFromV2, with the driver's reserved
	// memory in MemReserved; with MemFromV1 (a driver without the v2 call)
	// it includes the reserved memory and MemReserved is absent.
	MemUsed     Stat   `json:"mem_used_mib"`
	MemReserved *Stat  `json:"mem_reserved_mib,omitempty"`
	MemSource   string `json:"mem_source,omitempty"`
	PowerW      Stat   `json:"power_w"`
	SMClock     Stat   `json:"sm_clock_mhz"`
	TempC       Stat   `json:"temp_c"`
	// EnergyJ is the energy the GPU used from its first sample to its last:
	// the rise of NVML's total-energy counter (EnergySource
	// EnergyFromCounter) where both samples carry it and it did not go
	// back (a driver reload), else power integrated over time
	// (EnergyFromPower, trapezoids between samples): a fallback, since
	// NVML's power reading is an average over up to a second (on Hopper)
	// and under a load step the integral read 3.7% low on an H200.
	// EnergyIntegratedJ is the integral, always, for comparison.
	EnergyJ           float64 `json:"energy_j"`
	EnergySource      string  `json:"energy_source"`
	EnergyIntegratedJ float64 `json:"energy_integrated_j"`
	// ThrottleReasons ORs the bitmask over all samples.
	ThrottleReasons uint64 `json:"throttle_reasons"`
	// Throttle is the fraction of the window under each reason.
	Throttle ThrottleFractions `json:"throttle_fraction"`
	// OwnProcs are the engine's processes seen on the GPU in the window;
	// ForeignProcs every other process (see GPUSummary.Contended).
	OwnProcs     []ProcSeen `json:"own_procs,omitempty"`
	ForeignProcs []ProcSeen `json:"foreign_procs,omitempty"`
	// Events are the XID and ECC events read during the window.
	Events []GPUEvent `json:"events,omitempty"`
	// ECCCorrectedNew and ECCUncorrectedNew are the rise of the volatile
	// ECC counters over the window.
	ECCCorrectedNew   uint64 `json:"ecc_corrected_new"`
	ECCUncorrectedNew uint64 `json:"ecc_uncorrected_new"`
}

// ProcSeen is one process seen on a GPU during a run's window.
type ProcSeen struct {
	Pid        int     `json:"pid"`
	Name       string  `json:"name,omitempty"` // "" when /proc could not see it
	Pgid       int     `json:"pgid,omitempty"`
	Sid        int     `json:"sid,omitempty"`
	MaxUsedMiB float64 `json:"max_used_mib"`
	Samples    int     `json:"samples"` // samples that listed it
	FirstTsUs  int64   `json:"first_ts_us"`
	LastTsUs   int64   `json:"last_ts_us"`
}

// String names the process for a reason: "pid 4242 (python3, up to 1754 MiB)".
func (p ProcSeen) String() string {
	name := GPUProc{Name: p.Name, Pgid: p.Pgid, Sid: p.Sid}.shownName()
	return fmt.Sprintf("pid %d (%s, up to %.0f MiB)", p.Pid, name, p.MaxUsedMiB)
}

// Where GPUStat.EnergyJ came from.
const (
	EnergyFromCounter = "nvml_energy_counter"
	EnergyFromPower   = "power_integration"
)

// GPUSummary is the gpu object of a run summary.
type GPUSummary struct {
	Available bool      `json:"available"`
	Reason    string    `json:"reason,omitempty"` // why not available
	PerGPU    []GPUStat `json:"per_gpu,omitempty"`
	// Imbalance is max/min of the GPUs' mean util_gpu (the load imbalance
	// across GPUs of the agentic experiments, docs/routing.md); 1
	// with one GPU, 0 when undefined (a GPU with zero mean utilization:
	// see ImbalanceNote).
	Imbalance     float64 `json:"imbalance"`
	ImbalanceNote string  `json:"imbalance_note,omitempty"`
	// Contended is set when a process other than the engine used one of the
	// run's GPUs during the window; ContendedReason names it. The run's
	// verdict becomes gpu_contended (results.Decide).
	Contended       bool   `json:"gpu_contended"`
	ContendedReason string `json:"gpu_contended_reason,omitempty"`
	// Throttled is set when a GPU was power or thermally throttled for more
	// of the window than the matrix allows and it cost the GPU more than
	// ThrottleMinClockLoss of its SM clock; the verdict becomes throttled.
	Throttled       bool   `json:"throttled"`
	ThrottledReason string `json:"throttled_reason,omitempty"`
	// ThrottleMaxFraction is the bound Throttled was decided with.
	ThrottleMaxFraction float64 `json:"throttle_max_fraction"`
	// HardwareEvents counts the XID and ECC events of every GPU in the
	// window, and the new ECC errors the counters show.
	HardwareEvents int `json:"hardware_events"`
}

// DefaultThrottleMaxFraction is the share of a run's window a GPU may spend
// power or thermally throttled before the run is marked throttled.
const DefaultThrottleMaxFraction = 0.1

// GPUSummaryOptions are what SummarizeGPUWith needs beyond the samples.
type GPUSummaryOptions struct {
	// Owner says which GPU processes are the engine's; nil owns none, so
	// any process on a GPU makes the run contended.
	Owner Owner
	// ThrottleMaxFraction bounds ThrottleFractions.ThermalOrPower; 1 or
	// more never marks a run.
	ThrottleMaxFraction float64
}

// GPUKey names one GPU: its host and index.
type GPUKey struct {
	Host string
	GPU  int
}

// SortedGPUKeys returns the keys of m sorted by host, then GPU index.
func SortedGPUKeys[V any](m map[GPUKey]V) []GPUKey {
	return slices.SortedFunc(maps.Keys(m), func(a, b GPUKey) int {
		return cmp.Or(strings.Compare(a.Host, b.Host), cmp.Compare(a.GPU, b.GPU))
	})
}

// SummarizeGPUWith summarizes gpu.jsonl samples per GPU (keyed by host and
// index, sorted that way), and marks the run contended (a foreign process
// on a GPU) or throttled (power or thermal throttling over the bound). With
// no samples it returns Available false.
func SummarizeGPUWith(samples []GPUSample, opt GPUSummaryOptions) GPUSummary {
	if len(samples) == 0 {
		return GPUSummary{Reason: "no GPU samples (NVML unavailable or no GPU)"}
	}
	by := map[GPUKey][]GPUSample{}
	for _, s := range samples {
		k := GPUKey{s.Host, s.GPU}
		by[k] = append(by[k], s)
	}
	sum := GPUSummary{Available: true, ThrottleMaxFraction: opt.ThrottleMaxFraction}
	var foreign, throttled []string
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, k := range SortedGPUKeys(by) {
		ss := by[k]
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].TsUs < ss[j].TsUs })
		g := GPUStat{Host: k.Host, GPU: k.GPU, UUID: ss[0].UUID, Name: ss[0].Name, N: len(ss)}
		g.DurationS = float64(ss[len(ss)-1].TsUs-ss[0].TsUs) / 1e6
		g.UtilGPU = statOf(ss, func(s *GPUSample) float64 { return s.UtilGPU })
		g.MemUsed = statOf(ss, func(s *GPUSample) float64 { return s.MemUsedMiB })
		g.MemSource = memSource(ss)
		if g.MemSource == MemFromV2 {
			g.MemReserved = reservedStat(ss)
		}
		g.PowerW = statOf(ss, func(s *GPUSample) float64 { return s.PowerW })
		g.SMClock = statOf(ss, func(s *GPUSample) float64 { return s.SMClockMHz })
		g.TempC = statOf(ss, func(s *GPUSample) float64 { return s.TempC })
		for i := range ss {
			g.ThrottleReasons |= ss[i].ThrottleReasons
			if i > 0 {
				dt := float64(ss[i].TsUs-ss[i-1].TsUs) / 1e6
				g.EnergyIntegratedJ += dt * (ss[i].PowerW + ss[i-1].PowerW) / 2
			}
		}
		g.EnergyJ, g.EnergySource = g.EnergyIntegratedJ, EnergyFromPower
		if a, z := ss[0].EnergyMJ, ss[len(ss)-1].EnergyMJ; a != nil && z != nil && *z >= *a {
			g.EnergyJ, g.EnergySource = float64(*z-*a)/1e3, EnergyFromCounter
		}
		g.Throttle = throttleFractions(ss)
		g.OwnProcs, g.ForeignProcs = procsSeen(ss, opt.Owner)
		g.Events, g.ECCCorrectedNew, g.ECCUncorrectedNew = hardwareEvents(ss)
		sum.HardwareEvents += len(g.Events) + int(g.ECCCorrectedNew+g.ECCUncorrectedNew)
		name := fmt.Sprintf("%s/gpu%d", k.Host, k.GPU)
		for _, p := range g.ForeignProcs {
			foreign = append(foreign, name+": "+p.String())
		}
		if f := g.Throttle.ThermalOrPower; f > opt.ThrottleMaxFraction {
			if costly, cost := g.Throttle.costly(); costly {
				throttled = append(throttled, fmt.Sprintf("%s: power or thermal throttling %.0f%% of the window (%s) > %.0f%%, %s",
					name, 100*f, g.Throttle.active(), 100*opt.ThrottleMaxFraction, cost))
			}
		}
		lo, hi = min(lo, g.UtilGPU.Mean), max(hi, g.UtilGPU.Mean)
		sum.PerGPU = append(sum.PerGPU, g)
	}
	if len(foreign) > 0 {
		sum.Contended = true
		sum.ContendedReason = "foreign process on the GPUs during the window: " + strings.Join(foreign, "; ")
	}
	if len(throttled) > 0 {
		sum.Throttled, sum.ThrottledReason = true, strings.Join(throttled, "; ")
	}
	switch {
	case lo > 0:
		sum.Imbalance = hi / lo
	case hi == 0:
		sum.Imbalance = 1
		sum.ImbalanceNote = "all GPUs idle (mean util 0)"
	default:
		sum.ImbalanceNote = "a GPU had mean util 0: max/min undefined"
	}
	return sum
}

// reservedStat is the Stat of the samples' reserved memory, over the samples
// that carry it; nil when none does.
func reservedStat(ss []GPUSample) *Stat {
	rs := slices.DeleteFunc(slices.Clone(ss), func(s GPUSample) bool { return s.MemReservedMiB == nil })
	if len(rs) == 0 {
		return nil
	}
	st := statOf(rs, func(s *GPUSample) float64 { return *s.MemReservedMiB })
	return &st
}

func statOf(ss []GPUSample, f func(*GPUSample) float64) Stat {
	st := Stat{Min: math.Inf(1), Max: math.Inf(-1)}
	total := 0.0
	for i := range ss {
		v := f(&ss[i])
		total += v
		st.Min, st.Max = min(st.Min, v), max(st.Max, v)
	}
	st.Mean = total / float64(len(ss))
	return st
}

// ReadGPUSamples reads gpu.jsonl lines. Host lines (with cpu_pct and no
// gpu field, as `mbench probe` interleaves them on one stream) are skipped;
// any other bad line is an error naming its line number.
func ReadGPUSamples(r io.Reader) ([]GPUSample, error) {
	gpus, _, err := ReadProbeStream(r)
	return gpus, err
}

// ReadProbeStream reads a stream of gpu.jsonl and host.jsonl lines (either
// or both) and separates them by shape.
func ReadProbeStream(r io.Reader) ([]GPUSample, []HostSample, error) {
	var (
		gpus  []GPUSample
		hosts []HostSample
	)
	lr := newLineReader(r)
	for lineNo := 1; ; lineNo++ {
		line, tooLong, err := lr.next()
		if errors.Is(err, io.EOF) {
			return gpus, hosts, nil
		}
		if err != nil {
			return gpus, hosts, fmt.Errorf("probe samples: line %d: %w", lineNo, err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if tooLong {
			return gpus, hosts, fmt.Errorf("probe samples: line %d: too long", lineNo)
		}
		var shape struct {
			GPU    *int     `json:"gpu"`
			CPUPct *float64 `json:"cpu_pct"`
		}
		if err := json.Unmarshal(line, &shape); err != nil {
			return gpus, hosts, fmt.Errorf("probe samples: line %d: %w", lineNo, err)
		}
		switch {
		case shape.GPU != nil:
			var s GPUSample
			if err := json.Unmarshal(line, &s); err != nil {
				return gpus, hosts, fmt.Errorf("gpu sample: line %d: %w", lineNo, err)
			}
			gpus = append(gpus, s)
		case shape.CPUPct != nil:
			var h HostSample
			if err := json.Unmarshal(line, &h); err != nil {
				return gpus, hosts, fmt.Errorf("host sample: line %d: %w", lineNo, err)
			}
			hosts = append(hosts, h)
		default:
			return gpus, hosts, fmt.Errorf("probe samples: line %d: neither a GPU sample (gpu) nor a host sample (cpu_pct)", lineNo)
		}
	}
}

// SummarizeGPU is SummarizeGPUWith with no engine processes known and the
// default throttle bound.
func SummarizeGPU(samples []GPUSample) GPUSummary {
	return SummarizeGPUWith(samples, GPUSummaryOptions{ThrottleMaxFraction: DefaultThrottleMaxFraction})
}
