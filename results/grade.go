package results

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// The run's self-grading: is the load generator to blame (client_limited),
// is the engine overloaded (saturated)?

// gradeSends fills achieved rate, send lag and the KS test, and decides
// client_limited.
func gradeSends(s *RunSummary, sends, lag []float64, in RunInput) {
	if r, ok := spanRate(sends); ok {
		s.AchievedRate = ptr(r)
	}
	var why []string
	if len(lag) > 0 {
		sort.Float64s(lag)
		s.SendLagP50Ms = ptr(percentileSorted(lag, 50))
		s.SendLagP99Ms = ptr(percentileSorted(lag, 99))
		s.SendLagMaxMs = ptr(lag[len(lag)-1])
		if p99 := *s.SendLagP99Ms; p99 > ClientLagP99Ms {
			why = append(why, fmt.Sprintf("send lag p99 %.1f ms exceeds %.0f ms: requests left later than scheduled", p99, ClientLagP99Ms))
		}
	}
	if cdf, law := gapLaw(in); cdf != nil && len(sends) >= 3 {
		gaps := make([]float64, len(sends)-1)
		for i := range gaps {
			gaps[i] = (sends[i+1] - sends[i]) / 1e9
		}
		if d, p, ok := ksTest(gaps, cdf); ok {
			s.KSStat, s.KSP = ptr(d), ptr(p)
			if p < ClientKSAlpha {
				why = append(why, fmt.Sprintf("the sent inter-arrival gaps are not %s (KS D=%.3f, p=%.2g < %.2g)", law, d, p, ClientKSAlpha))
			}
		}
	}
	if len(why) > 0 {
		s.ClientLimited = true
		s.ClientLimitedReason = "load generator fell behind: " + strings.Join(why, "; ")
	}
}

// gapLaw is the CDF of the offered inter-arrival gap (s) and its name, or nil
// when the arrival process has no fixed gap law (constant, trace).
func gapLaw(in RunInput) (func(float64) float64, string) {
	rate := in.Offered
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, ""
	}
	switch strings.ToLower(in.Arrival) {
	case "", "poisson":
		return distuv.Exponential{Rate: rate}.CDF, fmt.Sprintf("exponential at %.4g req/s", rate)
	case "gamma":
		if in.Burstiness > 0 {
			k := in.Burstiness
			return distuv.Gamma{Alpha: k, Beta: rate * k}.CDF, fmt.Sprintf("gamma(k=%.3g) at %.4g req/s", k, rate)
		}
	}
	return nil, ""
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
		med := percentileSorted(ttftSorted, 50)
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
