package results

import (
	"fmt"
	"sort"
	"strings"

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
		sg := openloop.SelfGrade(in.Records, in.Offered, openloop.Arrival{Process: strings.ToLower(in.Arrival), Burstiness: in.Burstiness})
		g = &sg
	}
	if g.Sent > 0 {
		s.SendLagP50Ms, s.SendLagP99Ms, s.SendLagMaxMs = ptr(g.LagP50Ms), ptr(g.LagP99Ms), ptr(g.LagMaxMs)
		s.AchievedSendRatio = ptr(g.AchievedRatio)
		if g.AchievedRate > 0 { // the sends inside the schedule's window, not first to last
			s.AchievedRate = ptr(g.AchievedRate)
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
	if s.Aborted {
		r := s.AbortReason
		if r == "" {
			r = "no reason given"
		}
		why = append(why, "run aborted early ("+r+")")
	}
	if s.ThrRatio != nil && *s.ThrRatio < SaturationThrRatio {
		why = append(why, fmt.Sprintf("thr_ratio %.3f < %.1f: the engine completed fewer requests than were offered", *s.ThrRatio, SaturationThrRatio))
	}
	if tr, ok := fitTrend(x, y); ok {
		s.TTFTSlopeMsPerS, s.TTFTSlopeP = ptr(tr.Slope), ptr(tr.P)
		med := openloop.PercentileSorted(ttftSorted, 50)
		rise := tr.Slope * tr.Span
		if tr.P < TrendAlpha && rise > TrendMinRise*med {
			why = append(why, fmt.Sprintf("TTFT rises through the window: +%.0f ms over %.0f s (slope %.3g ms/s, p=%.2g), more than half the median TTFT %.0f ms", rise, tr.Span, tr.Slope, tr.P, med))
		}
	}
	if len(why) > 0 {
		s.Saturated = true
		s.SaturationReason = strings.Join(why, "; ")
	}
}

// errorKey groups failed requests by the start of their error message.
func errorKey(r *Record) string {
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
	const maxLen = 60
	if len(msg) > maxLen {
		cut := maxLen
		for cut > 0 && !isRuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return msg
}

// isRuneStart reports whether b begins a UTF-8 sequence.
func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

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
