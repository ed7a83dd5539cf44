package results

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mbench/mbench/openloop"
)

// SLO is the per-request service-level objective of a run, in
// milliseconds: a matrix's slo section (matrices decodes it into this
// type) or the load command's --slo; a zero bound is not part of it. A
// request meets it when every bound set holds (≤); goodput and SLO
// attainment count against it. It shapes the analysis only, never the
// load.
type SLO struct {
	TTFTMs float64 `json:"ttft_ms,omitempty"`
	TPOTMs float64 `json:"tpot_ms,omitempty"`
	E2ELMs float64 `json:"e2el_ms,omitempty"`
}

// String is the SLO as a report shows it: "TTFT ≤ 500 ms, TPOT ≤ 50 ms".
func (o SLO) String() string {
	var parts []string
	for _, b := range []struct {
		name string
		ms   float64
	}{{"TTFT", o.TTFTMs}, {"TPOT", o.TPOTMs}, {"E2EL", o.E2ELMs}} {
		if b.ms > 0 {
			parts = append(parts, fmt.Sprintf("%s ≤ %g ms", b.name, b.ms))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// sloMetrics are the SLO's metrics, compared across configs whenever the
// runs have them.
var sloMetrics = []string{MetricGoodput, MetricSLOAttainment}

// meets reports whether a completed request meets every bound of o, by the
// definitions of vLLM's calculate_metrics (vllm/benchmarks/serve.py at vLLM
// commit b36adfa3, in 0.18.1, lines 392–481):
//
//   - TTFT, E2EL and TPOT as Record.TTFTMs, E2ELMs and TPOTMs define them
//     (as for the latency statistics);
//   - TPOT = (E2EL − TTFT) / (output tokens − 1) when output tokens > 1,
//     else 0, so a one-token answer meets any TPOT bound ("if output_len <= 1,
//     we regard tpot as 0 for goodput", lines 624–630);
//   - a request is good when every bound given is ≥ its value (≤ passes,
//     line 660).
//
// Where vLLM would take a missing first-token time as 0, mbench does not
// count an unmeasured TTFT or E2EL as met.
func (o SLO) meets(r *Record) bool {
	ttft, ok := r.TTFTMs()
	e2el, ok2 := r.E2ELMs()
	if !ok || !ok2 {
		return false
	}
	tpot, _ := r.TPOTMs() // 0 for a one-token answer
	return (o.TTFTMs <= 0 || ttft <= o.TTFTMs) &&
		(o.TPOTMs <= 0 || tpot <= o.TPOTMs) &&
		(o.E2ELMs <= 0 || e2el <= o.E2ELMs)
}

// applySLO sets the SLO fields of a run summary whose other fields are
// already computed from the same records:
//
//   - slo_met: the measured requests that completed (status ok) and meet
//     every bound — vLLM's good_completed, which counts successful outputs
//     only (serve.py line 605);
//   - request_goodput = slo_met / duration, the measured window, as
//     request_throughput = completed / duration (vLLM: good_completed /
//     dur_s, serve.py line 767; BenchmarkMetrics.request_goodput, line 333);
//   - slo_attainment = slo_met / (completed + measured requests the engine
//     failed): the share of the requests that the run answered or failed that
//     met the SLO. Requests the harness cut off at the end (drained,
//     canceled) are neither, as in the error-rate check of Decide.
//
// Without an SLO nothing is set (the fields stay absent, never 0).
func applySLO(s *RunSummary, recs []Record, o *SLO) {
	if o == nil || *o == (SLO{}) {
		return
	}
	slo := *o
	met := 0
	for i := range recs {
		r := &recs[i]
		if r.Phase == openloop.PhaseMeasure && r.Status == openloop.StatusOK && slo.meets(r) {
			met++
		}
	}
	s.SLO, s.SLOMet = &slo, &met
	if s.Duration > 0 {
		s.Goodput = ptr(float64(met) / s.Duration)
	}
	if n := s.Completed + s.engineFailed(); n > 0 {
		s.SLOAttainment = ptr(float64(met) / float64(n))
	}
}

// engineFailed counts the measured requests the engine failed: every
// failure but those the harness cut off.
func (s *RunSummary) engineFailed() (n int) {
	for class, k := range s.Errors {
		if !harnessCut(class) {
			n += k
		}
	}
	return n
}

// withSLOCompare adds the SLO metrics to the compared metrics when some cell
// has them and the sweep does not list them already.
func withSLOCompare(s *Sweep, cells []*Cell) {
	compared := s.ComparedMetrics()
	out := slices.Clone(s.Compare)
	for _, m := range sloMetrics {
		if !slices.ContainsFunc(compared, func(c Named) bool { return c.Key == m }) && AnyCellHas(cells, m) {
			out = append(out, m)
		}
	}
	s.Compare = out
}
