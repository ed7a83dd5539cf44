package results

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mbench/mbench/openloop"
)

// Verdict is what one run is, decided in one place (Decide) and journaled.
// Only VerdictOK runs count toward the stopping rule, the comparisons and the
// tables; every other verdict is counted and explained in report.md and on
// the console's last line.
type Verdict string

// The verdicts, in the order they are checked: the first that applies wins,
// and the run's reasons list every one that applied.
const (
	// VerdictFailed: the engine or the harness failed (the engine died, a
	// file could not be written, the engine never became ready).
	VerdictFailed Verdict = "failed"
	// VerdictErrors: more measured requests failed than
	// measure.max_error_rate allows; the failures are counted by class.
	VerdictErrors Verdict = "errors"
	// VerdictSaturated: the engine could not keep up with the offered rate
	// (thr_ratio below the bound, or TTFT rising through the window).
	VerdictSaturated Verdict = "saturated"
	// VerdictIncomplete: fewer than min_completed measured requests
	// completed before measure.timeout (or the run was aborted).
	VerdictIncomplete Verdict = "incomplete"
	// VerdictShortOutputs: with fixed lengths asked (max_tokens =
	// min_tokens, ignore_eos), the engine ended some outputs before the
	// tokens asked for (a stop string, a slot's context running out): the
	// run measured another workload than the one asked for. A matrix that
	// accepts this sets measure.allow_short_outputs.
	VerdictShortOutputs Verdict = "short_outputs"
	// VerdictClientLimited: the load generator did not send on schedule.
	VerdictClientLimited Verdict = "client_limited"
	// VerdictGPUContended: a process other than the engine used one of the
	// run's GPUs during the window.
	VerdictGPUContended Verdict = "gpu_contended"
	// VerdictThrottled: a GPU was power or thermally throttled for more of
	// the window than the matrix allows.
	VerdictThrottled Verdict = "throttled"
	// VerdictOK: a result.
	VerdictOK Verdict = "ok"
	// VerdictHostLost is no verdict on the engine: a host of the run
	// stopped answering, so the run was cut short or never started. The
	// sweep journals it (never Decide), it is no failure of the cell, and
	// resume runs it again; a later line of the same run supersedes it.
	VerdictHostLost Verdict = "host_lost"
)

// Verdicts lists every verdict in the order of precedence (host_lost, which
// Decide never gives, last).
var Verdicts = []Verdict{VerdictFailed, VerdictErrors, VerdictSaturated, VerdictIncomplete,
	VerdictShortOutputs, VerdictClientLimited, VerdictGPUContended, VerdictThrottled, VerdictOK, VerdictHostLost}

// Valid reports whether v is one of Verdicts.
func (v Verdict) Valid() bool { return slices.Contains(Verdicts, v) }

// Usable reports whether a run with this verdict is a result.
func (v Verdict) Usable() bool { return v == VerdictOK }

// ParseVerdict checks a verdict read from a file.
func ParseVerdict(s string) (Verdict, error) {
	v := Verdict(s)
	if !v.Valid() {
		names := make([]string, len(Verdicts))
		for i, k := range Verdicts {
			names[i] = string(k)
		}
		return "", fmt.Errorf("verdict %q is not one of %s", s, strings.Join(names, ", "))
	}
	return v, nil
}

// UnmarshalText refuses unknown verdicts; "" (a summary written before
// verdicts, or by a caller that did not decide one) stays "".
func (v *Verdict) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*v = ""
		return nil
	}
	p, err := ParseVerdict(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// DefaultMaxErrorRate is measure.max_error_rate when the matrix does not set
// it: more than 1% of the measured requests failing makes a run "errors".
const DefaultMaxErrorRate = 0.01

// Policy is what a run is held to, from the matrix's measure section.
type Policy struct {
	// MinCompleted is the number of measured requests that must complete
	// (0: no minimum, as for a trace replayed to its end).
	MinCompleted int
	// Requests is the number of measured requests that must finish on their
	// own merits, completed or failed by the engine (0: no such count): a
	// run of a fixed number of requests is incomplete when one was cut off
	// by the harness or never sent, not when the engine failed one.
	Requests int
	// MaxErrorRate is the largest share of failed measured requests (engine
	// failures; requests the harness cut off at the end are not counted)
	// that still makes a result, when MaxErrorRateSet (0 then allows none);
	// DefaultMaxErrorRate otherwise.
	MaxErrorRate    float64
	MaxErrorRateSet bool
	// SLO, when set, is what the run's goodput and SLO attainment count
	// against (slo.go); it does not change the verdict.
	SLO *SLO
	// AllowShortOutputs keeps a run with outputs the engine cut short
	// (RunSummary.ShortOutputs) a result (measure.allow_short_outputs).
	AllowShortOutputs bool
}

func (p Policy) maxErrorRate() float64 {
	if !p.MaxErrorRateSet {
		return DefaultMaxErrorRate
	}
	return p.MaxErrorRate
}

// Decide is the one place a run's verdict is decided. It sets s.Verdict and
// s.VerdictReasons: every condition that applies, in the order of Verdicts,
// the first of which is the verdict. A run whose engine or harness failed
// has no summary; its verdict is VerdictFailed, decided by the caller.
func Decide(s *RunSummary, p Policy) {
	type cond struct {
		v   Verdict
		why string
	}
	var cs []cond
	engineFailed, cut := 0, 0
	byEngine := map[string]int{}
	for class, n := range s.Errors {
		if harnessCut(class) {
			cut += n
		} else {
			engineFailed += n
			byEngine[class] = n
		}
	}
	erred := false
	if n := s.Completed + engineFailed; engineFailed > 0 && float64(engineFailed) > p.maxErrorRate()*float64(n) {
		erred = true
		cs = append(cs, cond{VerdictErrors, fmt.Sprintf("%d of %d measured requests failed (%s), more than max_error_rate %g allows",
			engineFailed, n, errorBreakdown(byEngine), p.maxErrorRate())})
	}
	if s.Saturated {
		cs = append(cs, cond{VerdictSaturated, s.SaturationReason})
	}
	if why := incompleteReason(s, p, engineFailed, cut, erred); why != "" {
		cs = append(cs, cond{VerdictIncomplete, why})
	}
	if s.ShortOutputs > 0 && !p.AllowShortOutputs {
		cs = append(cs, cond{VerdictShortOutputs, shortOutputsReason(s)})
	}
	if s.ClientLimited {
		cs = append(cs, cond{VerdictClientLimited, s.ClientLimitedReason})
	}
	if s.GPU != nil && s.GPU.Contended {
		cs = append(cs, cond{VerdictGPUContended, s.GPU.ContendedReason})
	}
	if s.GPU != nil && s.GPU.Throttled {
		cs = append(cs, cond{VerdictThrottled, s.GPU.ThrottledReason})
	}
	s.Verdict, s.VerdictReasons = VerdictOK, nil
	if len(cs) == 0 {
		return
	}
	// A run that could not even send the requests it had to complete (the
	// timeout or duration ends sending first) falls short whatever the
	// engine did: incomplete is then the cause, and any saturation seen in
	// it comes after. Otherwise a saturated engine explains a shortfall.
	// Failures beyond max_error_rate still come first: they are the
	// engine's, whatever the window. Ranks are in half steps, so incomplete
	// moved ahead of saturated sits strictly between errors and saturated.
	sentTooFew := p.MinCompleted > 0 && s.NumPrompts < p.MinCompleted && !s.Aborted
	rank := func(v Verdict) int {
		if sentTooFew && v == VerdictIncomplete {
			return 2*slices.Index(Verdicts, VerdictSaturated) - 1
		}
		return 2 * slices.Index(Verdicts, v)
	}
	slices.SortStableFunc(cs, func(a, b cond) int { return rank(a.v) - rank(b.v) })
	s.Verdict = cs[0].v
	for _, c := range cs {
		s.VerdictReasons = append(s.VerdictReasons, string(c.v)+": "+c.why)
	}
}

// incompleteReason says why the run has too few requests to be a result, or
// "" when it has enough. Failed requests are errors, said by the errors
// verdict: they count as finished here, and a shortfall that the failures
// themselves caused (the run aborted for failures, or every request failed)
// is not said twice. Requests the harness cut off while they streamed (a
// drain timeout shorter than the outputs) leave the window's last requests
// unmeasured: incomplete, unless an abort already explains them.
func incompleteReason(s *RunSummary, p Policy, engineFailed, cut int, erred bool) string {
	if erred && (s.Completed == 0 || (s.Aborted && s.AbortCause == openloop.AbortFailures)) {
		return ""
	}
	var parts []string
	finished := s.Completed + engineFailed
	switch {
	case p.MinCompleted > 0 && s.Completed < p.MinCompleted:
		why := fmt.Sprintf("%d of the %d measured requests required completed", s.Completed, p.MinCompleted)
		if engineFailed > 0 {
			why += fmt.Sprintf(" (%d others failed)", engineFailed)
		}
		parts = append(parts, why+stopPhrase(s))
	case p.Requests > 0 && finished < p.Requests:
		parts = append(parts, fmt.Sprintf("%d of the %d measured requests asked for finished (completed or failed)", finished, p.Requests)+stopPhrase(s))
	case s.NumPrompts == 0:
		return "no measured request was sent"
	case s.Completed == 0:
		parts = append(parts, "no measured request completed"+stopPhrase(s))
	}
	if s.CutStreaming > 0 && !s.Aborted {
		why := fmt.Sprintf("%d measured requests were still streaming when the harness ended the run (measure.drain_timeout, or a stop): the engine was serving them, and the window's last requests are unmeasured", s.CutStreaming)
		if s.P99E2ELMs != nil {
			why += fmt.Sprintf(" (raise measure.drain_timeout above the requests' E2EL; the completed ones' p99 was %.3g s)", *s.P99E2ELMs/1e3)
		}
		parts = append(parts, why)
	} else if len(parts) > 0 && cut > 0 {
		parts[len(parts)-1] += fmt.Sprintf("; %d were still in flight when the run ended", cut)
	}
	return strings.Join(parts, "; ")
}

// shortOutputsReason says how many outputs the engine cut short, how
// short, and the finish reasons it gave.
func shortOutputsReason(s *RunSummary) string {
	why := fmt.Sprintf("%d of %d completed measured requests ended before the tokens asked for with fixed lengths", s.ShortOutputs, s.Completed)
	if s.ShortOutputMeanShare != nil {
		why += fmt.Sprintf(" (on average %.1f%% of them", 100**s.ShortOutputMeanShare)
		if len(s.ShortOutputFinish) > 0 {
			why += "; finish reasons: " + errorBreakdown(s.ShortOutputFinish)
		}
		why += ")"
	}
	if s.ShortOutputExample != "" {
		why += "; e.g. " + s.ShortOutputExample
	}
	return why + ": the engine cut them short (a stop string, a slot's context, a length limit of its own), so the run measured shorter outputs than its shape; measure.allow_short_outputs: true accepts them"
}

// stopPhrase says when sending stopped, for the incomplete reason.
func stopPhrase(s *RunSummary) string {
	if s.Aborted {
		return " (aborted: " + s.AbortReason + ")"
	}
	switch s.StopReason {
	case "timeout", "":
		// A summary without a stop reason was written before they were
		// recorded, when only the timeout could stop a run short.
		return " before measure.timeout"
	case "canceled":
		return " before the run was interrupted"
	case "duration":
		return " within the measured duration"
	case "trace_end":
		return " by the end of the trace"
	case "requests":
		return " when the last request had been sent"
	}
	return " (sending stopped: " + s.StopReason + ")"
}

// harnessCut reports whether a failure class means the harness ended the
// request (the run's drain ran out, or the run was stopped), not that the
// engine failed it.
func harnessCut(class string) bool {
	return class == string(openloop.ErrClassDrained) || class == string(openloop.ErrClassCanceled)
}

// errorBreakdown is "412 http_5xx, 3 timeout", most frequent first.
func errorBreakdown(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(m[b]-m[a], strings.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

// VerdictCounts counts runs by verdict.
type VerdictCounts map[Verdict]int

// String is "40 ok, 3 saturated, 2 errors", in the order of Verdicts, ok
// first.
func (vc VerdictCounts) String() string {
	var parts []string
	if n := vc[VerdictOK]; n > 0 || vc.Total() == 0 {
		parts = append(parts, fmt.Sprintf("%d ok", n))
	}
	for _, v := range Verdicts {
		if v != VerdictOK && vc[v] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", vc[v], v))
		}
	}
	return strings.Join(parts, ", ")
}

// Total is the number of runs counted.
func (vc VerdictCounts) Total() int {
	n := 0
	for _, k := range vc {
		n += k
	}
	return n
}
