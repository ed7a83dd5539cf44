package probes

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// A step log carries three kinds of line, told apart by their fields:
//
//   - a step line: step_duration_us (and ts_us), one per engine step;
//   - a GPU line: gpu_us and gpu_batch without step_duration_us, the GPU
//     time of a batch whose CUDA events completed after its step line was
//     written (or measured in another process);
//   - a status line: "status":"engine", what the plugin hooked in one
//     engine process, written when the engine starts (before it reports
//     ready) and again with every flush, so any slice of the log has it.

// EngineStatus is one status line: which step hooks an engine process has,
// which it could not apply (and why), and whether it measures GPU time.
type EngineStatus struct {
	PID     int64  `json:"pid"`
	Plugin  string `json:"plugin,omitempty"`
	VLLM    string `json:"vllm,omitempty"`
	Path    string `json:"path,omitempty"` // StepPathBatchQueue or StepPathStep
	GPUTime string `json:"gpu_time"`       // GPUMeasured or GPUNotMeasured
	// GPUHook says what the CUDA events bracket (measured only).
	GPUHook string `json:"gpu_hook,omitempty"`
	// GPUSampleEvery is N where a random 1 in N forwards is timed (1: every
	// one; measured only).
	GPUSampleEvery int64 `json:"gpu_sample_every,omitempty"`
	// GPUReason says why GPU time is not measured (not measured only).
	GPUReason  string        `json:"gpu_reason,omitempty"`
	Incomplete []HookProblem `json:"incomplete,omitempty"`
}

// HookProblem is a hook the plugin could not apply, and why.
type HookProblem struct {
	Hook   string `json:"hook"`
	Reason string `json:"reason"`
}

// The vocabulary of status lines.
const (
	StepPathBatchQueue = "batch_queue" // EngineCore.step_with_batch_queue
	StepPathStep       = "step"        // EngineCore.step
	GPUMeasured        = "measured"
	GPUNotMeasured     = "not_measured"
	statusEngine       = "engine"
	maxEngines         = 64 // status entries kept per summary (distinct pids)
)

// GPUTiming says whether a log measured GPU time, and how or why not.
type GPUTiming struct {
	// Measured is true when at least one kept step carried gpu_us.
	Measured bool `json:"measured"`
	// Steps counts kept step lines with gpu_us; Late counts GPU lines.
	// Neither counts host-bound spans.
	Steps int64 `json:"steps,omitempty"`
	Late  int64 `json:"late,omitempty"`
	// HostBound counts the kept lines whose GPU span was host-bound (the
	// GPU waited for the host's launches, so the span holds host time):
	// left out of gpu_us; HostBoundSpanP50 is their spans' median, µs, an
	// upper bound of their GPU time.
	HostBound        int64   `json:"host_bound,omitempty"`
	HostBoundSpanP50 float64 `json:"host_bound_span_p50_us,omitempty"`
	// Source is what the events bracket (from the status lines).
	Source string `json:"source,omitempty"`
	// SampleEvery is the largest N of the engines that timed a random 1 in
	// N forwards (absent: every forward, or an older plugin); the other
	// batches carry no gpu_us, never an estimate.
	SampleEvery int64 `json:"sample_every,omitempty"`
	// Reason says why GPU time is not measured, when it is not.
	Reason string `json:"reason,omitempty"`
}

// NoGPUReason is GPUTiming.Reason for a log that neither measured GPU time
// nor said why (no status line: an older plugin or the simulated engine).
const NoGPUReason = "the log has no gpu_us and no status line saying why (an engine without the GPU timer, e.g. the simulated engine)"

// parseStatus decodes a status line; ok is false for any other line.
func parseStatus(line []byte) (EngineStatus, bool) {
	var raw struct {
		Status *string `json:"status"`
		EngineStatus
	}
	if err := json.Unmarshal(line, &raw); err != nil || raw.Status == nil || *raw.Status != statusEngine {
		return EngineStatus{}, false
	}
	return raw.EngineStatus, true
}

// statusSet collects the status lines of a log: the last one per pid.
type statusSet struct {
	byPID   map[int64]int
	engines []EngineStatus
	dropped int64
}

// addLine keeps line if it is a status line, and says whether it was.
func (s *statusSet) addLine(line []byte) bool {
	es, ok := parseStatus(line)
	if !ok {
		return false
	}
	if s.byPID == nil {
		s.byPID = map[int64]int{}
	}
	if i, ok := s.byPID[es.PID]; ok {
		s.engines[i] = es
		return true
	}
	if len(s.engines) >= maxEngines {
		s.dropped++
		return true
	}
	s.byPID[es.PID] = len(s.engines)
	s.engines = append(s.engines, es)
	return true
}

// finish fills the status-derived fields of st.
func (s *statusSet) finish(st *StepStats) {
	st.Engines = s.engines
	seen := map[string]bool{}
	for _, es := range s.engines {
		for _, p := range es.Incomplete {
			k := p.Hook + ": " + p.Reason
			if !seen[k] {
				seen[k] = true
				st.Incomplete = append(st.Incomplete, k)
			}
		}
	}
	sort.Strings(st.Incomplete)
	if s.dropped > 0 {
		st.Incomplete = append(st.Incomplete, fmt.Sprintf("status: %d more engine processes not listed", s.dropped))
	}
	g := &st.GPU
	g.Measured = g.Steps+g.Late > 0
	var sources, reasons []string
	for _, es := range s.engines {
		switch {
		case es.GPUTime == GPUMeasured && es.GPUHook != "":
			sources = appendUnique(sources, es.GPUHook)
			if es.GPUSampleEvery > 1 && es.GPUSampleEvery > g.SampleEvery {
				g.SampleEvery = es.GPUSampleEvery
			}
		case es.GPUTime != GPUMeasured:
			reasons = appendUnique(reasons, cmp.Or(es.GPUReason, "the plugin did not say why"))
		}
	}
	g.Source = strings.Join(sources, "; ")
	switch {
	case g.Measured:
	case g.HostBound > 0:
		g.Reason = fmt.Sprintf("every GPU-timed batch (%d) was host-bound: the GPU reached the forward's start event before the host had launched the forward, so the span of the CUDA events (p50 %.0f µs) holds host time — an upper bound, not the GPU time", g.HostBound, g.HostBoundSpanP50)
	case len(reasons) > 0:
		g.Reason = strings.Join(reasons, "; ")
	case len(sources) > 0:
		g.Reason = "the GPU timer was on but no kept step carried gpu_us"
	default:
		g.Reason = NoGPUReason
	}
}

// appendUnique appends s to list unless list has it.
func appendUnique(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}
