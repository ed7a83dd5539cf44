package results

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

var t0 = time.Date(2026, 5, 26, 17, 28, 0, 0, time.UTC)

const ms = int64(time.Millisecond)

// okRecord is a successful measured request: sent at sentNs, first token
// after ttftMs, then `out` tokens spaced itlMs apart.
func okRecord(id int, sentNs int64, ttftMs float64, out int, itlMs float64) Record {
	first := sentNs + int64(ttftMs*float64(ms))
	itl := make([]float64, out-1)
	for i := range itl {
		itl[i] = itlMs
	}
	last := first + int64(float64(out-1)*itlMs*float64(ms))
	return Record{ID: id, Phase: "measure", ScheduledNs: sentNs, SentNs: sentNs, FirstTokenNs: first,
		LastTokenNs: last, DoneNs: last + ms, InputTokens: 100, OutputTokens: out, ITLMs: itl, Status: "ok"}
}

// knownRun has 10 measured requests with TTFT 50..59 ms, 5 output tokens
// 10 ms apart, send lag 0.0..0.9 ms, plus a warmup and a failed request.
func knownRun() RunInput {
	var recs []Record
	recs = append(recs, Record{ID: 0, Phase: "warmup", SentNs: 100 * ms, FirstTokenNs: 10_000 * ms, LastTokenNs: 10_000 * ms, OutputTokens: 5, Status: "ok"})
	for i := 0; i < 10; i++ {
		r := okRecord(i+1, 1000*ms+int64(i)*100*ms, 50+float64(i), 5, 10)
		r.ScheduledNs = r.SentNs - int64(i)*ms/10
		recs = append(recs, r)
	}
	recs = append(recs, Record{ID: 11, Phase: "measure", ScheduledNs: 1050 * ms, SentNs: 1050 * ms, DoneNs: 1060 * ms,
		Status: "error", Error: "HTTP 500: internal error\nTraceback ...", HTTPStatus: 500})
	return RunInput{Cell: "c1", Config: "plain", Shape: "4096x256", Rate: 10, Block: 1, Engine: "sim", Simulated: true,
		Arrival: "constant", Records: recs, Start: t0, WindowStart: t0.Add(time.Second), WindowEnd: t0.Add(2 * time.Second),
		Offered: 10, ClientCPUPct: 12.5}
}

func TestSummarizeRunKnownValues(t *testing.T) {
	s, err := SummarizeRun(knownRun())
	if err != nil {
		t.Fatal(err)
	}
	eq := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || !near(*got, want, 1e-6) {
			t.Errorf("%s = %v, want %v", name, deref(got), want)
		}
	}
	if s.Completed != 10 || s.Failed != 1 || s.NumPrompts != 11 {
		t.Errorf("completed/failed/num_prompts = %d/%d/%d, want 10/1/11", s.Completed, s.Failed, s.NumPrompts)
	}
	if s.Duration != 1 || s.RequestThroughput != 10 || s.OutputThroughput != 50 || s.TotalInputTokens != 1000 || s.TotalOutputTokens != 50 {
		t.Errorf("duration/throughput/tokens = %v/%v/%v/%v/%v", s.Duration, s.RequestThroughput, s.OutputThroughput, s.TotalInputTokens, s.TotalOutputTokens)
	}
	// TTFT 50..59: numpy mean 54.5, median 54.5, p90 58.1, p99 58.91, std √8.25.
	eq("mean_ttft_ms", s.MeanTTFTMs, 54.5)
	eq("median_ttft_ms", s.MedianTTFTMs, 54.5)
	eq("p90_ttft_ms", s.P90TTFTMs, 58.1)
	eq("p99_ttft_ms", s.P99TTFTMs, 58.91)
	eq("std_ttft_ms", s.StdTTFTMs, math.Sqrt(8.25))
	eq("mean_e2el_ms", s.MeanE2ELMs, 94.5) // TTFT + 4·10 ms
	eq("p90_e2el_ms", s.P90E2ELMs, 98.1)
	eq("mean_tpot_ms", s.MeanTPOTMs, 10) // (E2EL − TTFT)/(5 − 1)
	eq("p99_tpot_ms", s.P99TPOTMs, 10)
	eq("median_itl_ms", s.MedianITLMs, 10)
	eq("p90_ttft_intended_ms", s.P90TTFTIntendedMs, 58.1+0.81) // + lag, which grows with TTFT
	eq("send_lag_p50_ms", s.SendLagP50Ms, 0.4)                 // lags 0, 0, 0.1, …, 0.9
	eq("send_lag_max_ms", s.SendLagMaxMs, 0.9)
	eq("achieved_rate", s.AchievedRate, 11/0.9041) // 11 sends in the schedule's window, 1000..1899.1 + 5 ms
	// Scheduled 1000..1899.1 ms, sent 1000..1900 ms: all 11 within the
	// schedule's window (to 1899.1 + 5 ms).
	eq("achieved_send_ratio", s.AchievedSendRatio, 1)
	// Scheduled sends span 1000..1899.1 ms (11 of them) ⇒ realized offered
	// rate 10/0.8991 s. All 10 requests the engine did not fail completed
	// ⇒ thr_ratio 1: neither the 500 nor the time after the last send
	// counts as load left undone.
	eq("offered_rate_realized", s.OfferedRealized, 10/0.8991)
	eq("thr_ratio", s.ThrRatio, 1)
	if s.KSStat != nil || s.KSP != nil {
		t.Error("KS computed for constant arrivals")
	}
	if s.Saturated || s.ClientLimited {
		t.Errorf("saturated=%v (%s) client_limited=%v (%s)", s.Saturated, s.SaturationReason, s.ClientLimited, s.ClientLimitedReason)
	}
	if len(s.Errors) != 1 || s.Errors["http_5xx"] != 1 || s.ErrorExamples["http_5xx"] != "HTTP 500: internal error" {
		t.Errorf("errors = %v", s.Errors)
	}
	if s.WindowStart != "2026-05-26T17:28:01Z" || s.ClientCPUPct != 12.5 || !s.Simulated || s.Engine != "sim" {
		t.Errorf("identity fields: %+v", s)
	}
}

// deref shows a pointer's value in test messages.
func deref(p *float64) any {
	if p == nil {
		return "null"
	}
	return *p
}

func TestSummarizeRunJSONNames(t *testing.T) {
	in := knownRun()
	in.Records = in.Records[len(in.Records)-1:] // only the failed request
	s, err := SummarizeRun(in)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(s)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"completed", "failed", "duration", "request_throughput", "output_throughput",
		"total_input_tokens", "total_output_tokens", "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
		"p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms", "offered_rate", "achieved_rate", "thr_ratio", "saturated",
		"send_lag_p99_ms", "achieved_send_ratio", "ks_p", "client_limited", "p99_ttft_intended_ms", "ttft_slope_ms_per_s", "errors", "simulated"} {
		if _, ok := m[k]; !ok {
			t.Errorf("summary JSON lacks %q", k)
		}
	}
	// No successful request: latencies are null, never a made-up 0.
	if m["p90_ttft_ms"] != nil || m["mean_tpot_ms"] != nil {
		t.Errorf("latency without samples: p90_ttft_ms=%v mean_tpot_ms=%v", m["p90_ttft_ms"], m["mean_tpot_ms"])
	}
}

// poissonRun is a run of n requests sent as a Poisson process at rate,
// with TTFT given by ttft(send time in s).
func poissonRun(seed uint64, n int, rate float64, ttft func(ts float64) float64, constantGaps bool) RunInput {
	rng := rand.New(rand.NewPCG(seed, 1))
	var recs []Record
	tNs := int64(time.Second)
	for i := 0; i < n; i++ {
		gap := rng.ExpFloat64() / rate
		if constantGaps {
			gap = 1 / rate
		}
		tNs += int64(gap * 1e9)
		recs = append(recs, okRecord(i, tNs, ttft(float64(tNs)/1e9), 4, 5))
	}
	last := recs[len(recs)-1].DoneNs
	return RunInput{Cell: "c", Config: "plain", Rate: rate, Block: 1, Arrival: "poisson", Records: recs,
		Start: t0, WindowStart: t0.Add(time.Duration(recs[0].SentNs)), WindowEnd: t0.Add(time.Duration(last)), Offered: rate}
}

func TestSummarizeRunSaturation(t *testing.T) {
	flat := func(float64) float64 { return 300 }
	cases := []struct {
		name    string
		in      RunInput
		sat     bool
		because string
	}{
		{"steady", poissonRun(1, 300, 10, flat, false), false, ""},
		// A healthy run whose Poisson sample came out 13% sparse: against
		// the nominal rate its thr_ratio would be 0.87.
		{"sparse sample", func() RunInput { in := poissonRun(1, 300, 10, flat, false); in.Offered = 10 * 1.15; return in }(), false, ""},
		// A third of the requests still in flight when the drain timeout
		// ended the run.
		{"thr_ratio", func() RunInput {
			in := poissonRun(1, 300, 10, flat, false)
			for i := 200; i < 300; i++ {
				r := &in.Records[i]
				r.Status, r.ErrorClass, r.Error, r.FirstTokenNs, r.LastTokenNs, r.ITLMs = "error", "drained", "drain timeout", 0, 0, nil
			}
			return in
		}(), true, "thr_ratio 0.667 < 0.9: 100 measured requests were still waiting for their first token when the run ended, against 200 completed"},
		// Completions at half the offered rate: the engine serves 5 req/s,
		// and the queue shows in TTFT.
		{"served at half the rate", func() RunInput {
			in := poissonRun(1, 300, 10, flat, false)
			for i := range in.Records {
				r := &in.Records[i]
				done := int64(time.Second) + int64(i)*200*ms
				shift := max(0, done-r.DoneNs)
				r.FirstTokenNs, r.LastTokenNs, r.DoneNs = r.FirstTokenNs+shift, r.LastTokenNs+shift, r.DoneNs+shift
			}
			in.WindowEnd = t0.Add(time.Duration(in.Records[len(in.Records)-1].DoneNs))
			return in
		}(), true, "TTFT rises"},
		{"aborted", func() RunInput {
			in := poissonRun(1, 300, 10, flat, false)
			in.Aborted, in.AbortReason = true, "in-flight 512 > 256"
			return in
		}(), true, "aborted early (in-flight 512 > 256)"},
		// +50 ms/s over ~30 s: a rise of ~1.5 s, far above half the median.
		{"ttft rising", poissonRun(2, 300, 10, func(ts float64) float64 { return 100 + 50*ts + 20*math.Sin(ts*7) }, false), true, "TTFT rises"},
		// Significant but small: +3 ms/s on 1 s TTFT is a 90 ms rise < 500 ms.
		{"small significant rise", poissonRun(3, 300, 10, func(ts float64) float64 { return 1000 + 3*ts + math.Sin(ts*5) }, false), false, ""},
	}
	for _, c := range cases {
		s, err := SummarizeRun(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.Saturated != c.sat || !strings.Contains(s.SaturationReason, c.because) {
			t.Errorf("%s: saturated=%v reason=%q, want %v containing %q (thr_ratio %v, slope %v p %v)", c.name, s.Saturated,
				s.SaturationReason, c.sat, c.because, deref(s.ThrRatio), deref(s.TTFTSlopeMsPerS), deref(s.TTFTSlopeP))
		}
	}
	s, _ := SummarizeRun(cases[6].in)
	if s.TTFTSlopeP == nil || *s.TTFTSlopeP > 0.01 {
		t.Errorf("small rise should still be significant: p = %v", deref(s.TTFTSlopeP))
	}
}

func TestSummarizeRunClientLimited(t *testing.T) {
	flat := func(float64) float64 { return 300 }
	lagged := poissonRun(4, 300, 10, flat, false)
	for i := range lagged.Records {
		if i%10 == 0 { // 10% of requests leave 12 ms late
			lagged.Records[i].ScheduledNs -= 12 * ms
		}
	}
	constant := poissonRun(5, 300, 10, flat, true)
	constArrival := poissonRun(5, 300, 10, flat, true)
	constArrival.Arrival = "constant"
	cases := []struct {
		name    string
		in      RunInput
		limited bool
		because string
	}{
		{"true poisson", poissonRun(6, 500, 50, flat, false), false, ""},
		{"send lag", lagged, true, "30 of 300 requests (10.0%) were sent more than 5 ms late"},
		{"constant gaps sent for poisson", constant, true, "not exponential"},
		{"constant arrival asked", constArrival, false, ""},
		{"gamma gaps sent for gamma", gammaRun(7, 500, 20, 0.25), false, ""},
		{"poisson gaps sent for gamma", func() RunInput {
			in := poissonRun(8, 500, 20, flat, false)
			in.Arrival, in.Burstiness = "gamma", 0.25
			return in
		}(), true, "not gamma(k=0.25)"},
	}
	for _, c := range cases {
		s, err := SummarizeRun(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s.ClientLimited != c.limited || !strings.Contains(s.ClientLimitedReason, c.because) {
			t.Errorf("%s: client_limited=%v reason=%q (ks_p %v), want %v containing %q", c.name, s.ClientLimited,
				s.ClientLimitedReason, deref(s.KSP), c.limited, c.because)
		}
	}
}

func TestSummarizeRunBadInput(t *testing.T) {
	in := knownRun()
	in.WindowEnd = in.WindowStart.Add(-time.Second)
	if _, err := SummarizeRun(in); err == nil || !strings.Contains(err.Error(), "window ends") {
		t.Errorf("window end before start: err = %v", err)
	}
	in = knownRun()
	in.Offered = -1
	if _, err := SummarizeRun(in); err == nil {
		t.Error("negative offered rate accepted")
	}
	if s, err := SummarizeRun(RunInput{}); err != nil || s.Completed != 0 {
		t.Errorf("empty input: %v, %v", s, err)
	}
}

func TestErrorExample(t *testing.T) {
	long := strings.Repeat("é", 150) // 300 bytes
	cases := []struct {
		r    Record
		want string
	}{
		{Record{Error: "dial tcp: connection refused"}, "dial tcp: connection refused"},
		{Record{Error: "  HTTP 503: busy\nmore"}, "HTTP 503: busy"},
		{Record{HTTPStatus: 429, Status: "error"}, "HTTP 429"},
		{Record{Status: "error"}, "status error (no message)"},
		{Record{Error: long}, strings.Repeat("é", 100) + "…"},
	}
	for _, c := range cases {
		if got := errorExample(&c.r); got != c.want {
			t.Errorf("errorExample(%q) = %q, want %q", c.r.Error, got, c.want)
		}
	}
}

func TestErrorClassOfOldRecords(t *testing.T) {
	cases := []struct {
		r    Record
		want string
	}{
		{Record{ErrorClass: "connection_refused", Error: "dial tcp 127.0.0.1:1: connect: connection refused"}, "connection_refused"},
		{Record{HTTPStatus: 503, Error: "HTTP 503: busy"}, "http_5xx"},
		{Record{HTTPStatus: 400, Error: "HTTP 400: This model's maximum context length is 4096 tokens"}, "context_length"},
		{Record{HTTPStatus: 429}, "http_429"},
		{Record{Error: "drain timeout"}, "drained"},
		{Record{Error: "something else"}, "other"},
	}
	for _, c := range cases {
		if got := errorClass(&c.r); got != c.want {
			t.Errorf("errorClass(%+v) = %q, want %q", c.r, got, c.want)
		}
	}
}

// gammaRun is a run whose sends follow a gamma renewal process with shape k
// (k < 1: bursty) at the given rate.
func gammaRun(seed uint64, n int, rate, k float64) RunInput {
	g := distuv.Gamma{Alpha: k, Beta: rate * k, Src: rand.New(rand.NewPCG(seed, 9))}
	var recs []Record
	tNs := int64(time.Second)
	for i := 0; i < n; i++ {
		tNs += int64(g.Rand() * 1e9)
		recs = append(recs, okRecord(i, tNs, 300, 4, 5))
	}
	last := recs[len(recs)-1].DoneNs
	return RunInput{Cell: "c", Config: "plain", Rate: rate, Block: 1, Arrival: "gamma", Burstiness: k, Records: recs,
		Start: t0, WindowStart: t0.Add(time.Duration(recs[0].SentNs)), WindowEnd: t0.Add(time.Duration(last)), Offered: rate}
}
