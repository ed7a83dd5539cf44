package results

import (
	"cmp"
	"slices"
	"strings"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/stats"
)

// DefaultClassBounds are the agentic experiments' request classes by new
// (uncached) prompt tokens (docs/routing.md): WARM below 5k, MEDIUM below 20k, HEAVY below 50k, HEAVY+
// above.
var DefaultClassBounds = [3]int{5000, 20000, 50000}

// ClassNames are the classes in order, as reports print them.
var ClassNames = [4]string{"WARM", "MEDIUM", "HEAVY", "HEAVY+"}

// ClassBasis is what a request's class is measured on.
type ClassBasis string

// Class bases.
const (
	// ClassByIdealNewTokens: the request's prompt tokens an ideal
	// (infinite) prefix cache fed the whole replay would not hold, from the
	// trace's hash ids (openloop.IdealNewTokens). A property of the
	// workload: the same requests are in the same class under every config.
	ClassByIdealNewTokens ClassBasis = "ideal_new_tokens"
	// ClassByInputTokens: the whole prompt. Also config-independent.
	ClassByInputTokens ClassBasis = "input_tokens"
	// ClassByRouterNewTokens: the router's estimate of the request's
	// uncached tokens on the instance its policy chose (routing.jsonl's
	// new_tokens_est), as the agentic experiments' proxy classified. It depends on the
	// routing: one request can be HEAVY under one policy and WARM under
	// another, so per-class rows of different configs compare different
	// requests.
	ClassByRouterNewTokens ClassBasis = "router_new_tokens"
)

// DependsOnRouting reports whether a request's class under b can change
// with the config.
func (b ClassBasis) DependsOnRouting() bool { return b == ClassByRouterNewTokens }

// ClassSummary is a run's latency and failures by request class.
type ClassSummary struct {
	Basis ClassBasis `json:"basis"`
	// DependsOnRouting: the classes are the router's estimate, so they
	// differ between configs (see ClassByRouterNewTokens).
	DependsOnRouting bool   `json:"depends_on_routing"`
	Bounds           [3]int `json:"bounds"`
	// Fallback counts measured requests the basis had no figure for,
	// classed by their input tokens instead.
	Fallback int          `json:"fallback,omitempty"`
	Classes  []ClassStats `json:"by_class"`
}

// ClassStats is one class of a run's measured requests.
type ClassStats struct {
	Class     string  `json:"class"`
	Requests  int     `json:"requests"` // measured requests in the class, whatever their outcome
	Completed int     `json:"completed"`
	Share     float64 `json:"share"` // of the run's completed requests
	Failed    int     `json:"failed"`
	// FailedBy counts the failures by error class (openloop.ErrorClass).
	FailedBy       map[string]int `json:"failed_by,omitempty"`
	FailedInputP50 *float64       `json:"failed_input_tokens_p50"`
	InputP50       *float64       `json:"input_tokens_p50"` // of the completed requests
	MedianTTFTMs   *float64       `json:"median_ttft_ms"`
	P90TTFTMs      *float64       `json:"p90_ttft_ms"`
	MedianTPOTMs   *float64       `json:"median_tpot_ms"`
	P90TPOTMs      *float64       `json:"p90_tpot_ms"`
	MedianE2ELMs   *float64       `json:"median_e2el_ms"`
	P90E2ELMs      *float64       `json:"p90_e2el_ms"`
	// IDs are the measured requests of the class (request ids, ascending):
	// what per-class comparisons pair across configs.
	IDs []int `json:"ids"`
}

// classIndex returns the class of n tokens under bounds.
func classIndex(n int, b [3]int) int {
	for i, x := range b {
		if n < x {
			return i
		}
	}
	return 3
}

// SummarizeClasses splits the measured records into classes by basis —
// tokens[id] (ideal or router new tokens) where given, else the input
// tokens — and gives each class its requests, failures, and the TTFT, TPOT
// and E2EL of its completed requests (defined as SummarizeRun defines
// them). Zero bounds are DefaultClassBounds.
func SummarizeClasses(recs []Record, basis ClassBasis, tokens map[int]int, bounds [3]int) *ClassSummary {
	if bounds == [3]int{} {
		bounds = DefaultClassBounds
	}
	basis = cmp.Or(basis, ClassByInputTokens)
	cs := &ClassSummary{Basis: basis, DependsOnRouting: basis.DependsOnRouting(), Bounds: bounds}
	var in, failedIn, ttft, tpot, e2el [4][]float64
	var st [4]ClassStats
	total := 0
	for i := range recs {
		r := &recs[i]
		if r.Phase != openloop.PhaseMeasure {
			continue
		}
		tok, ok := tokens[r.ID]
		if !ok {
			tok = r.InputTokens
			if basis != ClassByInputTokens {
				cs.Fallback++
			}
		}
		c := classIndex(tok, bounds)
		st[c].Requests++
		st[c].IDs = append(st[c].IDs, r.ID)
		if r.Status != openloop.StatusOK {
			st[c].Failed++
			if st[c].FailedBy == nil {
				st[c].FailedBy = map[string]int{}
			}
			st[c].FailedBy[string(r.ErrorClass)]++
			failedIn[c] = append(failedIn[c], float64(r.InputTokens))
			continue
		}
		st[c].Completed++
		total++
		in[c] = append(in[c], float64(r.InputTokens))
		ttft[c] = TTFT.Append(ttft[c], r)
		tpot[c] = TPOT.Append(tpot[c], r)
		e2el[c] = E2EL.Append(e2el[c], r)
	}
	for c := range 4 {
		s := st[c]
		s.Class = ClassNames[c]
		if total > 0 {
			s.Share = float64(s.Completed) / float64(total)
		}
		slices.Sort(s.IDs)
		s.InputP50, _ = pct50and90(in[c])
		s.FailedInputP50, _ = pct50and90(failedIn[c])
		s.MedianTTFTMs, s.P90TTFTMs = pct50and90(ttft[c])
		s.MedianTPOTMs, s.P90TPOTMs = pct50and90(tpot[c])
		s.MedianE2ELMs, s.P90E2ELMs = pct50and90(e2el[c])
		cs.Classes = append(cs.Classes, s)
	}
	return cs
}

// pct50and90 returns the median and p90 of xs (sorted in place), nil when
// empty.
func pct50and90(xs []float64) (*float64, *float64) {
	if len(xs) == 0 {
		return nil, nil
	}
	slices.Sort(xs)
	return ptr(stats.PercentileSorted(xs, 50)), ptr(stats.PercentileSorted(xs, 90))
}

// ClassMetric is the metric key of what (share, p90_ttft_ms, …) for a
// class: class_<class>_<what>, the class in lower case (HEAVY+ →
// heavy_plus); with what "", the prefix of them all.
func ClassMetric(class, what string) string {
	return "class_" + strings.ReplaceAll(strings.ToLower(class), "+", "_plus") + "_" + what
}

// The figures of each request class, by ClassMetric's what, beside its
// latencies (classLatencies).
const (
	ClassRequests       = "requests"  // measured requests, whatever their outcome
	ClassCompleted      = "completed" // of them
	ClassShare          = "share"     // of the run's completed requests
	ClassFailed         = "failed"
	ClassFailRate       = "fail_rate"
	ClassInputP50       = "input_p50"        // input tokens of the completed requests
	ClassFailedInputP50 = "failed_input_p50" // and of the failed ones
)

// classFigures are the unit and direction of each figure of a class.
var classFigures = map[string]Metric{
	ClassRequests: {Unit: UnitCount}, ClassCompleted: {Unit: UnitCount, Better: HigherIsBetter}, ClassShare: {Unit: UnitShare},
	ClassFailed: {Unit: UnitCount, Better: LowerIsBetter}, ClassFailRate: {Unit: UnitShare, Better: LowerIsBetter},
	ClassInputP50: {Unit: UnitTokens}, ClassFailedInputP50: {Unit: UnitTokens},
}

// classLatencies are the latency statistics of a class, keyed as the
// run's own (ms, lower is better).
var classLatencies = []string{TTFT.Key(StatMedian), TTFT.Key(StatP90), TPOT.Key(StatMedian), TPOT.Key(StatP90), E2EL.Key(StatMedian), E2EL.Key(StatP90)}

// classRows puts a run's class figures: class_<c>_<what>.
func classRows(s *RunSummary, put func(string, *float64)) {
	if s.Classes == nil {
		return
	}
	for _, st := range s.Classes.Classes {
		p := ClassMetric(st.Class, "")
		put(p+ClassShare, &st.Share)
		put(p+ClassRequests, ptr(float64(st.Requests)))
		put(p+ClassCompleted, ptr(float64(st.Completed)))
		put(p+ClassFailed, ptr(float64(st.Failed)))
		put(p+ClassFailedInputP50, st.FailedInputP50)
		if st.Requests > 0 {
			put(p+ClassFailRate, ptr(float64(st.Failed)/float64(st.Requests)))
		}
		put(p+ClassInputP50, st.InputP50)
		for i, v := range []*float64{st.MedianTTFTMs, st.P90TTFTMs, st.MedianTPOTMs, st.P90TPOTMs, st.MedianE2ELMs, st.P90E2ELMs} {
			put(p+classLatencies[i], v)
		}
	}
}
