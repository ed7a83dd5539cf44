package openloop

import (
	"fmt"
	"github.com/mbench/mbench/stats"
	"math"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// The rule by which a run is marked client-limited — the generator, not the
// server, shaped what was measured. Each criterion asks for an effect large
// enough to matter, so that it flags overload and not noise, at any n:
//
//   - late: requests sent more than ClientLateMs after their scheduled time
//     make up more than ClientLateShare of the measured sends, with 99%
//     confidence (one-sided binomial test at ClientLateAlpha). One stall of
//     the OS never grades a run of 60 requests (at most one or two late of
//     60 is consistent with a 1% share), while a generator that falls
//     behind makes every later request late.
//   - slow: fewer than ClientLimitedRatio of the measured requests, and at
//     least ClientSlowMin fewer, were sent within the schedule's own window
//     (first to last scheduled send, plus ClientLateMs). A 1% shortfall is
//     under one request at n < 100, where the late rule speaks instead.
//   - shape: for Poisson and gamma arrivals, the distance D of the KS test
//     of the sent gaps against the offered law exceeds its critical value
//     at ClientLimitedKSAlpha (what sampling alone reaches in 1% of runs,
//     1.63/√n) by more than ClientLimitedKSMaxD. At large n the test alone
//     rejects deviations of no practical effect (D = 0.02 at n = 10,000).
const (
	ClientLateMs         = 5.0  // a send later than this is late
	ClientLateShare      = 0.01 // largest tolerated share of late sends
	ClientLateAlpha      = 0.01 // confidence of the late-share test
	ClientLimitedRatio   = 0.99 // sent within the window / scheduled
	ClientSlowMin        = 3    // and at least this many requests short
	ClientLimitedKSAlpha = 0.01 // KS test rejects the offered distribution
	ClientLimitedKSMaxD  = 0.05 // ... by more than this distance beyond its critical value
	// KSResolution is the grid on which the KS test compares distribution
	// functions. A sender's wake-up jitter (tens of µs) would make a
	// continuous KS test reject every high-rate run — with n = λT gaps it
	// detects jitter above ~1.6/(λ^1.5 √T), 10 µs at 2,000 req/s for 3 s —
	// while on a 0.1 ms grid such jitter matters only to second order and
	// stalls, catch-up bursts and a wrong rate still show.
	KSResolution = 100 * time.Microsecond
)

// Grade is the load generator grading itself over the measured requests.
type Grade struct {
	Sent     int     `json:"sent"`       // measured requests sent
	LagP50Ms float64 `json:"lag_p50_ms"` // send lag = sent − scheduled
	LagP99Ms float64 `json:"lag_p99_ms"`
	LagMaxMs float64 `json:"lag_max_ms"`
	// Late counts the sends later than ClientLateMs; LateShare is Late/Sent.
	Late      int     `json:"late"`
	LateShare float64 `json:"late_share"`
	// AchievedRatio is the share of the scheduled requests that were sent
	// (written) inside the schedule's own window: from the first to the last
	// scheduled send of the measured requests, plus ClientLateMs. Against the
	// schedule, not the nominal rate, so the sampling noise of a finite
	// Poisson schedule does not count as error; a request never written
	// counts as not sent. SentRate is those sends over the window, req/s.
	AchievedRatio float64 `json:"achieved_ratio"`
	SentRate      float64 `json:"sent_rate"`
	// AchievedRate is the requests the server acknowledged — whose response
	// head came back, whatever its status — inside the same window, over the
	// window, req/s. A write only puts a request in a socket buffer: at
	// 6,000 req/s offered to a server that took 1,300–1,900, the sends
	// counted 2,260–5,876. Records without head_ns (written before it
	// existed) give SentRate.
	AchievedRate float64 `json:"achieved_rate"`
	OKRatio      float64 `json:"ok_ratio"` // measured requests completed OK / sent
	// KS tests the gaps between actual sends against the offered gap
	// distribution (exponential for Poisson, gamma for gamma) on a
	// KSResolution grid; not applicable to constant arrivals or trace replay.
	KSApplicable  bool    `json:"ks_applicable"`
	KSD           float64 `json:"ks_d"`
	KSP           float64 `json:"ks_p"`
	ClientLimited bool    `json:"client_limited"`
	// Unreachable counts the measured requests that were never written
	// because the server refused or dropped the connection: they are the
	// server's failures (the run's errors say so), not sends the generator
	// missed, and are left out of the rest of the grade.
	Unreachable int    `json:"unreachable,omitempty"`
	Reason      string `json:"reason,omitempty"` // why it is client-limited, in words
}

// SelfGrade grades the measured records of a run offered at rate req/s with
// the given arrival process. It is the one grading of the load generator:
// Run puts it in Result.Grade, and results.SummarizeRun copies it into
// summary_A.json (or calls SelfGrade on the records, which gives the same).
// A burst (rate +Inf) is not graded: every request is due at once, so
// none can be late. The KS test is skipped when rate ≤ 0, for constant arrivals, for a
// gamma process without a burstiness > 0, with fewer than 20 measured sends,
// and for trace replay (records with TraceNs set), whose gaps follow the
// trace rather than a parametric law.
func SelfGrade(recs []Record, rate float64, a Arrival) Grade {
	t := tallySends(recs)
	g := Grade{Sent: len(t.sent), Unreachable: t.unreachable}
	if t.scheduled == 0 {
		return g
	}
	if math.IsInf(rate, 1) { // a burst: all due at once, sent as fast as they go; nothing can be late
		g.AchievedRatio, g.OKRatio = float64(len(t.sent))/float64(t.scheduled), float64(t.ok)/math.Max(1, float64(len(t.sent)))
		return g
	}
	end := float64(t.last) + ClientLateMs*1e6
	inWindow := countIn(t.sent, float64(t.first), end)
	g.AchievedRatio = float64(inWindow) / float64(t.scheduled)
	if span := (end - float64(t.first)) / 1e9; span > 0 && t.scheduled > 1 {
		g.SentRate = float64(inWindow) / span
		g.AchievedRate = g.SentRate
		if len(t.heads) > 0 {
			g.AchievedRate = float64(countIn(t.heads, float64(t.first), end)) / span
		}
	}
	if len(t.sent) == 0 {
		return g
	}
	sort.Float64s(t.lags)
	g.LagP50Ms, g.LagP99Ms, g.LagMaxMs = stats.Quantile(t.lags, 0.5), stats.Quantile(t.lags, 0.99), t.lags[len(t.lags)-1]
	for _, l := range t.lags {
		if l > ClientLateMs {
			g.Late++
		}
	}
	g.LateShare = float64(g.Late) / float64(len(t.lags))
	g.OKRatio = float64(t.ok) / float64(len(t.sent))
	if cdf := gapCDF(a, rate); cdf != nil && !t.trace && len(t.sent) >= 20 {
		g.KSApplicable = true
		g.KSD, g.KSP = stats.KSTestGrid(gapsOf(t.sent), cdf, KSResolution.Seconds())
	}
	if why := clientLimits(g, a, rate, t.scheduled, inWindow); len(why) > 0 {
		g.ClientLimited = true
		g.Reason = "the load generator fell behind: " + strings.Join(why, "; ")
	}
	return g
}

// sendTally is what grading reads of a run's measured records.
type sendTally struct {
	sent, lags, heads []float64 // send times (ns, less the cap's wait), send lags (ms), response heads (ns)
	ok, scheduled     int       // completed OK; scheduled, less the unreachable
	unreachable       int       // never written: the server refused or dropped the connection
	trace             bool      // a trace or ramp record: no parametric gap law
	first, last       int64     // the first and last scheduled send (ns)
}

// tallySends reads the measured records for grading.
func tallySends(recs []Record) sendTally {
	t := sendTally{first: math.MaxInt64, last: math.MinInt64}
	for i := range recs {
		r := &recs[i]
		if r.Phase != PhaseMeasure {
			continue
		}
		if r.SentNs == 0 && (r.ErrorClass == ErrClassConnRefused || r.ErrorClass == ErrClassConnReset) {
			// The server refused or dropped the connection before the
			// request could be written (an engine that died): the
			// generator was on time, so the request is not one it failed
			// to send.
			t.unreachable++
			continue
		}
		t.scheduled++
		t.first, t.last = min(t.first, r.ScheduledNs), max(t.last, r.ScheduledNs)
		if r.HeadNs != 0 {
			t.heads = append(t.heads, float64(r.HeadNs))
		}
		if r.SentNs == 0 {
			continue
		}
		t.trace = t.trace || r.TraceNs != 0 || r.Ramp
		// A wait for a slot under a concurrency cap is the cap's, not the
		// generator's: the request is graded as sent when it got its slot.
		t.sent = append(t.sent, float64(r.SentNs-r.QueuedNs))
		t.lags = append(t.lags, float64(r.Lag())/1e6)
		if r.OK() {
			t.ok++
		}
	}
	return t
}

// clientLimits are the criteria of the client-limited rule that g meets,
// in words; inWindow of the scheduled requests were sent within the
// schedule's window.
func clientLimits(g Grade, a Arrival, rate float64, scheduled, inWindow int) []string {
	var why []string
	if p := stats.BinomialTail(g.Late, g.Sent, ClientLateShare); p < ClientLateAlpha {
		why = append(why, fmt.Sprintf("%d of %d requests (%.1f%%) were sent more than %.0f ms late, more than %.0f%% (binomial p=%.2g); send lag p99 %.2f ms",
			g.Late, g.Sent, 100*g.LateShare, ClientLateMs, 100*ClientLateShare, p, g.LagP99Ms))
	}
	if g.AchievedRatio < ClientLimitedRatio && scheduled-inWindow >= ClientSlowMin {
		why = append(why, fmt.Sprintf("only %d of %d requests (%.3f < %.2f) were sent within the schedule's window: requests left slower than scheduled",
			inWindow, scheduled, g.AchievedRatio, ClientLimitedRatio))
	}
	if crit := ksCritical(g.Sent - 1); g.KSApplicable && g.KSD > crit+ClientLimitedKSMaxD {
		law := fmt.Sprintf("exponential at %.4g req/s", rate)
		if a.Process == ArrivalGamma {
			law = fmt.Sprintf("gamma(k=%.3g) at %.4g req/s", a.Burstiness, rate)
		}
		why = append(why, fmt.Sprintf("the sent inter-arrival gaps are not %s (KS test on a %v grid: D=%.4f > %.4f + %.2f, p=%.2g)",
			law, KSResolution, g.KSD, crit, ClientLimitedKSMaxD, g.KSP))
	}
	return why
}

// countIn counts the times in ts within [lo, hi].
func countIn(ts []float64, lo, hi float64) int {
	n := 0
	for _, t := range ts {
		if t >= lo && t <= hi {
			n++
		}
	}
	return n
}

// gapsOf sorts ts (ns) and returns the gaps between them in seconds.
func gapsOf(ts []float64) []float64 {
	sort.Float64s(ts)
	gaps := make([]float64, max(len(ts)-1, 0))
	for i := range gaps {
		gaps[i] = (ts[i+1] - ts[i]) / 1e9
	}
	return gaps
}

// ksCritical is the KS distance that n gaps drawn from the offered law
// exceed with probability ClientLimitedKSAlpha (Stephens' approximation,
// the same as KSTest's p-value).
func ksCritical(n int) float64 {
	sn := math.Sqrt(float64(n))
	return 1.6276 / (sn + 0.12 + 0.11/sn) // Q_KS(1.6276) = 0.01
}

// gapCDF is the CDF of the offered inter-arrival gap in seconds, or nil when
// the KS test does not apply.
func gapCDF(a Arrival, rate float64) func(float64) float64 {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil
	}
	switch a.Process {
	case "", ArrivalPoisson:
		return distuv.Exponential{Rate: rate}.CDF
	case ArrivalGamma:
		if a.Burstiness > 0 && !math.IsInf(a.Burstiness, 0) {
			return distuv.Gamma{Alpha: a.Burstiness, Beta: rate * a.Burstiness}.CDF
		}
	}
	return nil
}
