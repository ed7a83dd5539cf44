package results

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/mbench/mbench/stats"

	"github.com/mbench/mbench/openloop"
)

// The run's self-grading: is the load generator to blame (client_limited),
// is the engine overloaded (saturated)?

// gradeSends fills the achieved rate and copies the load generator's
// self-grading into the summary: in.Grade when the caller has it
// (openloop.Result.Grade), else openloop.SelfGrade over the records — the same
// function Run calls, so the summary and the generator never disagree.
func gradeSends(s *RunSummary, sends []float64, in RunInput) {
	if r, ok := spanRate(sends); ok {
		s.AchievedRate = ptr(r)
	}
	g := in.Grade
	if g == nil {
		g = new(openloop.SelfGrade(in.Records, in.Offered, openloop.Arrival{Process: strings.ToLower(in.Arrival), Burstiness: in.Burstiness}))
	}
	if g.Sent > 0 {
		s.SendLagP50Ms, s.SendLagP99Ms, s.SendLagMaxMs = ptr(g.LagP50Ms), ptr(g.LagP99Ms), ptr(g.LagMaxMs)
		s.AchievedSendRatio = ptr(g.AchievedRatio)
		if g.AchievedRate > 0 { // acknowledged inside the schedule's window, not first to last
			s.AchievedRate, s.SentRate = ptr(g.AchievedRate), ptr(g.SentRate)
		}
	}
	if g.KSApplicable {
		s.KSStat, s.KSP = ptr(g.KSD), ptr(g.KSP)
	}
	s.ClientLimited, s.ClientLimitedReason = g.ClientLimited, g.Reason
}

// gradeSaturation runs the TTFT trend test and decides saturated.
func gradeSaturation(s *RunSummary, x, y, ttftSorted []float64) {
	var why []string
	// Only an abort for overload says the engine could not keep up; one for
	// failures is an engine that fails requests (verdict errors). A summary
	// with no cause (written before causes existed) counts as overload.
	if s.Aborted && (s.AbortCause == openloop.AbortOverload || s.AbortCause == "") {
		why = append(why, "run aborted early ("+cmp.Or(s.AbortReason, "no reason given")+")")
	}
	// thr_ratio judges only a run with enough requests to judge: at rate
	// 1e-9 nothing is offered, nothing completes, and the run is
	// incomplete, not saturated. Nor is an engine that completes nothing at
	// all (it hangs): a saturated engine still completes requests, fewer
	// than were offered.
	if n := s.Completed + s.CutWaiting; s.ThrRatio != nil && *s.ThrRatio < SaturationThrRatio && n >= SaturationMinOffered && s.Completed > 0 {
		why = append(why, fmt.Sprintf("thr_ratio %.3f < %.1f: %d measured requests were still waiting for their first token when the run ended, against %d completed",
			*s.ThrRatio, SaturationThrRatio, s.CutWaiting, s.Completed))
	}
	if tr, ok := stats.FitTrend(x, y); ok {
		s.TTFTSlopeMsPerS, s.TTFTSlopeP = ptr(tr.Slope), ptr(tr.P)
		med := stats.PercentileSorted(ttftSorted, 50)
		rise := tr.Slope * tr.Span
		first, last := quarterMedians(x, y)
		if floor := max(TrendMinRise*med, TrendMinRiseMs); tr.P < TrendAlpha && rise > floor && last-first > floor {
			trend := fmt.Sprintf("TTFT rises through the window: +%.3g ms over %.0f s (slope %.3g ms/s, p=%.2g), more than half the median TTFT %.3g ms (and %g ms), and the last quarter's median TTFT %.3g ms is that far above the first quarter's %.3g ms", rise, tr.Span, tr.Slope, tr.P, med, TrendMinRiseMs, last, first)
			switch q := s.PrefixCache; {
			case !engineQueueSays(q):
				why = append(why, trend)
			case q.Waiting.Max > 0:
				why = append(why, fmt.Sprintf("%s, and the engine's queue held up to %.0f requests waiting (mean %.2g over %d scrapes)", trend, q.Waiting.Max, q.Waiting.Mean, q.DuringRounds))
			default:
				s.TTFTDriftMs = ptr(rise)
				s.DriftReason = fmt.Sprintf("%s, while the engine's own queue stayed empty in all %d scrapes of the window: the engine slowed down (its own time per request rose), which is a drift of +%.3g ms, not saturation", trend, q.DuringRounds, rise)
			}
		}
	}
	if len(why) > 0 {
		s.Saturated = true
		s.SaturationReason = strings.Join(why, "; ")
	}
}

// EngineQueueMinRounds is the fewest during-window scrapes of the engine's
// queue gauge that let the queue, rather than TTFT's trend alone, decide
// whether a rising TTFT is saturation.
const EngineQueueMinRounds = 3

// engineQueueSays reports whether the engine exported its queue
// (vllm:num_requests_waiting, llamacpp:requests_deferred) and it was read
// often enough through the window to speak for it.
func engineQueueSays(q *CacheSummary) bool {
	return q != nil && q.WaitingExported && q.DuringRounds >= EngineQueueMinRounds
}

// quarterMedians is the median TTFT of the requests sent in the first and
// in the last quarter of the window. A queue that builds up (saturation)
// keeps TTFT high to the end; a passing stall of the host (a loaded machine)
// lifts the fitted slope but not the last quarter, and must not grade a run
// saturated.
func quarterMedians(x, y []float64) (first, last float64) {
	if len(x) == 0 {
		return 0, 0
	}
	lo, hi := slices.Min(x), slices.Max(x)
	q := (hi - lo) / 4
	var a, b []float64
	for i := range x {
		switch {
		case x[i] <= lo+q:
			a = append(a, y[i])
		case x[i] >= hi-q:
			b = append(b, y[i])
		}
	}
	if len(a) == 0 || len(b) == 0 {
		return 0, 0
	}
	sort.Float64s(a)
	sort.Float64s(b)
	return stats.PercentileSorted(a, 50), stats.PercentileSorted(b, 50)
}

// errorClass is the class of a failed record: its error_class, or, for a
// record written before classes existed, one inferred from its HTTP status
// (else "other").
func errorClass(r *Record) string {
	if r.ErrorClass != "" {
		return string(r.ErrorClass)
	}
	if r.HTTPStatus != 0 && r.HTTPStatus != 200 {
		return string(openloop.ClassifyHTTP(r.HTTPStatus, r.Error))
	}
	if r.Error == "drain timeout" {
		return string(openloop.ErrClassDrained)
	}
	return string(openloop.ErrClassOther)
}

// errorExample is the first line of a record's error text, cut to 200 bytes
// at a rune boundary.
func errorExample(r *Record) string {
	msg := strings.TrimSpace(r.Error)
	if i := strings.IndexAny(msg, "\r\n"); i >= 0 {
		msg = msg[:i]
	}
	if msg == "" {
		if r.HTTPStatus != 0 {
			return fmt.Sprintf("HTTP %d", r.HTTPStatus)
		}
		return "status " + r.Status + " (no message)"
	}
	const maxLen = 200
	if len(msg) > maxLen {
		cut := maxLen
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return msg
}

// spanRate is the event rate (per second) of times in ns: (n − 1) / (last −
// first). It sorts ts.
func spanRate(ts []float64) (float64, bool) {
	sort.Float64s(ts)
	n := len(ts)
	if n < 2 || ts[n-1] <= ts[0] {
		return 0, false
	}
	return float64(n-1) / ((ts[n-1] - ts[0]) / 1e9), true
}
