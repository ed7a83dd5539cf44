package probes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
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
	MemUsed   Stat    `json:"mem_used_mib"`
	PowerW    Stat    `json:"power_w"`
	SMClock   Stat    `json:"sm_clock_mhz"`
	TempC     Stat    `json:"temp_c"`
	// EnergyJ integrates power over time (trapezoids between samples).
	EnergyJ float64 `json:"energy_j"`
	// ThrottleReasons ORs the bitmask over all samples.
	ThrottleReasons uint64 `json:"throttle_reasons"`
}

// GPUSummary is the gpu object of a run summary.
type GPUSummary struct {
	Available bool      `json:"available"`
	Reason    string    `json:"reason,omitempty"` // why not available
	PerGPU    []GPUStat `json:"per_gpu,omitempty"`
	// Imbalance is max/min of the GPUs' mean util_gpu (seed 003 §3.3); 1
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
	// of the window than the matrix allows; the verdict becomes throttled.
	Throttled       bool   `json:"throttled"`
	ThrottledReason string `json:"throttled_reason,omitempty"`
}

// GPUKey names one GPU: its host and index.
type GPUKey struct {
	Host string
	GPU  int
}

// SortedGPUKeys returns the keys of m sorted by host, then GPU index.
func SortedGPUKeys[V any](m map[GPUKey]V) []GPUKey {
	keys := make([]GPUKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Host != keys[j].Host {
			return keys[i].Host < keys[j].Host
		}
		return keys[i].GPU < keys[j].GPU
	})
	return keys
}

// SummarizeGPU summarizes gpu.jsonl samples per GPU (keyed by host and
// index, sorted that way). With no samples it returns Available false.
func SummarizeGPU(samples []GPUSample) GPUSummary {
	if len(samples) == 0 {
		return GPUSummary{Reason: "no GPU samples (NVML unavailable or no GPU)"}
	}
	by := map[GPUKey][]GPUSample{}
	for _, s := range samples {
		k := GPUKey{s.Host, s.GPU}
		by[k] = append(by[k], s)
	}
	sum := GPUSummary{Available: true}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, k := range SortedGPUKeys(by) {
		ss := by[k]
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].TsUs < ss[j].TsUs })
		g := GPUStat{Host: k.Host, GPU: k.GPU, UUID: ss[0].UUID, Name: ss[0].Name, N: len(ss)}
		g.DurationS = float64(ss[len(ss)-1].TsUs-ss[0].TsUs) / 1e6
		g.UtilGPU = statOf(ss, func(s *GPUSample) float64 { return s.UtilGPU })
		g.MemUsed = statOf(ss, func(s *GPUSample) float64 { return s.MemUsedMiB })
		g.PowerW = statOf(ss, func(s *GPUSample) float64 { return s.PowerW })
		g.SMClock = statOf(ss, func(s *GPUSample) float64 { return s.SMClockMHz })
		g.TempC = statOf(ss, func(s *GPUSample) float64 { return s.TempC })
		for i := range ss {
			g.ThrottleReasons |= ss[i].ThrottleReasons
			if i > 0 {
				dt := float64(ss[i].TsUs-ss[i-1].TsUs) / 1e6
				g.EnergyJ += dt * (ss[i].PowerW + ss[i-1].PowerW) / 2
			}
		}
		lo, hi = min(lo, g.UtilGPU.Mean), max(hi, g.UtilGPU.Mean)
		sum.PerGPU = append(sum.PerGPU, g)
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

// SliceGPUSamples keeps the samples with fromUs ≤ ts_us ≤ toUs (0 leaves a
// side unbounded), to cut a run's window out of a longer probe stream.
func SliceGPUSamples(samples []GPUSample, fromUs, toUs int64) []GPUSample {
	var out []GPUSample
	for _, s := range samples {
		if (fromUs == 0 || s.TsUs >= fromUs) && (toUs == 0 || s.TsUs <= toUs) {
			out = append(out, s)
		}
	}
	return out
}
