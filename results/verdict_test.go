package results

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop"
)

// verdictRun is a healthy run of n requests at 10 req/s: each is sent on
// schedule, answers its first token after 20 ms and ends 40 ms later.
func verdictRun(n int) RunInput {
	var recs []Record
	for i := 0; i < n; i++ {
		sent := int64(time.Second) + int64(i)*int64(100*time.Millisecond)
		recs = append(recs, okRecord(i, sent, 20, 4, 10))
	}
	last := recs[len(recs)-1].DoneNs
	return RunInput{Cell: "c", Config: "plain", Rate: 10, Block: 1, Arrival: "constant", Records: recs,
		Start: t0, WindowStart: t0.Add(time.Second), WindowEnd: t0.Add(time.Duration(last)), Offered: 10,
		Policy: Policy{MinCompleted: n}}
}

// fail turns record i into a failure of the given class.
func fail(in *RunInput, i int, class openloop.ErrorClass, msg string) {
	r := &in.Records[i]
	r.Status, r.ErrorClass, r.Error = openloop.StatusError, class, msg
	r.FirstTokenNs, r.LastTokenNs, r.ITLMs, r.OutputTokens = 0, 0, nil, 0
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name   string
		edit   func(in *RunInput)
		want   Verdict
		reason string // a part of the first reason
	}{
		{"healthy", func(*RunInput) {}, VerdictOK, ""},
		{"every request HTTP 500", func(in *RunInput) {
			for i := range in.Records {
				fail(in, i, openloop.ErrClassHTTP5xx, "HTTP 500: boom")
			}
		}, VerdictErrors, "100 of 100 measured requests failed (100 http_5xx)"},
		{"one failure in 100 is within the default 1%", func(in *RunInput) {
			fail(in, 50, openloop.ErrClassHTTP5xx, "HTTP 500")
			in.Policy.MinCompleted = 99
		}, VerdictOK, ""},
		{"two failures in 100 are not", func(in *RunInput) {
			fail(in, 50, openloop.ErrClassConnReset, "reset")
			fail(in, 51, openloop.ErrClassMalformedStream, "bad chunk")
			in.Policy.MinCompleted = 98
		}, VerdictErrors, "2 of 100 measured requests failed (1 connection_reset, 1 malformed_stream)"},
		{"max_error_rate raised", func(in *RunInput) {
			for i := 0; i < 5; i++ {
				fail(in, i, openloop.ErrClassContextLength, "HTTP 400: maximum context length")
			}
			in.Policy = Policy{MinCompleted: 95, MaxErrorRate: 0.1, MaxErrorRateSet: true}
		}, VerdictOK, ""},
		{"cut short before min_completed", func(in *RunInput) {
			in.Policy.MinCompleted = 300
		}, VerdictIncomplete, "100 of the 300 measured requests required completed before measure.timeout"},
		{"nothing completed", func(in *RunInput) {
			in.Records = nil
			in.Policy.MinCompleted = 0
		}, VerdictIncomplete, "no measured request was sent"},
		{"rate 1e-9: nothing offered, nothing completed", func(in *RunInput) {
			in.Records, in.Offered, in.Rate = nil, 1e-9, 1e-9
			in.WindowEnd = in.WindowStart.Add(30 * time.Second)
		}, VerdictIncomplete, "0 of the 100 measured requests required completed before measure.timeout"},
		{"drained requests are not engine errors", func(in *RunInput) {
			for i := 95; i < 100; i++ {
				fail(in, i, openloop.ErrClassDrained, "drain timeout")
			}
			in.Policy.MinCompleted = 95
		}, VerdictOK, ""},
		{"client limited", func(in *RunInput) {
			in.Grade = &openloop.Grade{Sent: 100, ClientLimited: true, Reason: "send lag p99 9 ms"}
		}, VerdictClientLimited, "send lag p99 9 ms"},
		{"gpu contended", func(in *RunInput) {
			in.GPU = &GPUSummary{Contended: true, ContendedReason: "pid 77 python3 held 1754 MiB on gpu0"}
		}, VerdictGPUContended, "pid 77"},
		{"throttled", func(in *RunInput) {
			in.GPU = &GPUSummary{Throttled: true, ThrottledReason: "gpu0 thermally throttled 40% of the window"}
		}, VerdictThrottled, "thermally"},
		{"errors win over saturation and incompleteness", func(in *RunInput) {
			for i := 0; i < 60; i++ {
				fail(in, i, openloop.ErrClassHTTP5xx, "HTTP 500")
			}
		}, VerdictErrors, "60 of 100"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := verdictRun(100)
			c.edit(&in)
			s, err := SummarizeRun(in)
			if err != nil {
				t.Fatal(err)
			}
			if s.Verdict != c.want {
				t.Fatalf("verdict %q, want %q (reasons %q)", s.Verdict, c.want, s.VerdictReasons)
			}
			if c.want == VerdictOK {
				if len(s.VerdictReasons) != 0 {
					t.Errorf("ok run with reasons %q", s.VerdictReasons)
				}
				return
			}
			if len(s.VerdictReasons) == 0 || !strings.HasPrefix(s.VerdictReasons[0], string(c.want)+": ") || !strings.Contains(s.VerdictReasons[0], c.reason) {
				t.Errorf("reasons %q, want the first to be %s and contain %q", s.VerdictReasons, c.want, c.reason)
			}
		})
	}
}

func TestVerdictVocabulary(t *testing.T) {
	for _, v := range Verdicts {
		if p, err := ParseVerdict(string(v)); err != nil || p != v {
			t.Errorf("ParseVerdict(%q) = %q, %v", v, p, err)
		}
		if v.Usable() != (v == VerdictOK) {
			t.Errorf("%s.Usable() = %v", v, v.Usable())
		}
	}
	if _, err := ParseVerdict("fine"); err == nil || !strings.Contains(err.Error(), "failed, errors, saturated") {
		t.Errorf("unknown verdict: %v", err)
	}
}

// A host stall in the middle of a run lifts the fitted TTFT slope but the
// queue drains again: not saturation. A queue that builds through the
// window is.
func TestTrendRuleNeedsAPersistentRise(t *testing.T) {
	stall := verdictRun(200)
	for i := 90; i < 130; i++ { // a 4 s stall of the host, TTFT up to 400 ms, then back
		r := &stall.Records[i]
		d := int64(400-10*abs(110-i)) * int64(time.Millisecond)
		r.FirstTokenNs += d
		r.LastTokenNs += d
		r.DoneNs += d
	}
	stall.Policy.MinCompleted = 200
	s, err := SummarizeRun(stall)
	if err != nil {
		t.Fatal(err)
	}
	if s.Saturated || s.Verdict != VerdictOK {
		t.Errorf("a passing stall graded %s: %q", s.Verdict, s.VerdictReasons)
	}
	queue := verdictRun(200)
	for i := range queue.Records { // each request waits 5 ms more than the last
		r := &queue.Records[i]
		d := int64(i) * int64(5*time.Millisecond)
		r.FirstTokenNs += d
		r.LastTokenNs += d
		r.DoneNs += d
	}
	queue.WindowEnd = t0.Add(time.Duration(queue.Records[199].DoneNs))
	s, err = SummarizeRun(queue)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Saturated || !strings.Contains(s.SaturationReason, "TTFT rises through the window") {
		t.Errorf("a building queue not graded saturated: %v %q", s.Saturated, s.SaturationReason)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TTFTs of a fraction of a millisecond that creep up by a fraction of a
// millisecond (a loaded host's scheduling, no queue) rise by "half the
// median" and significantly, but by less than the generator's own send
// precision: not saturation. The same creep on top of a real queue is.
func TestTrendRuleHasAnAbsoluteFloor(t *testing.T) {
	creep := func(base, perReqMs float64) RunInput {
		in := verdictRun(200)
		for i := range in.Records {
			r := &in.Records[i]
			ttft := int64((base + perReqMs*float64(i)) * float64(time.Millisecond))
			d := ttft - (r.FirstTokenNs - r.SentNs)
			r.FirstTokenNs += d
			r.LastTokenNs += d
			r.DoneNs += d
		}
		in.WindowEnd = t0.Add(time.Duration(in.Records[199].DoneNs))
		return in
	}
	s, err := SummarizeRun(creep(0.2, 0.002)) // 0.2 → 0.6 ms
	if err != nil {
		t.Fatal(err)
	}
	if s.Saturated || s.TTFTSlopeP == nil || *s.TTFTSlopeP > TrendAlpha {
		t.Errorf("a 0.4 ms creep: saturated %v (%s), slope p %v; want a significant slope and no saturation", s.Saturated, s.SaturationReason, deref(s.TTFTSlopeP))
	}
	s, _ = SummarizeRun(creep(0.2, 0.05)) // 0.2 → 10 ms
	if !s.Saturated || !strings.Contains(s.SaturationReason, "(and 5 ms)") {
		t.Errorf("a 10 ms rise: saturated %v (%s)", s.Saturated, s.SaturationReason)
	}
}

// A run that could not send the requests it had to complete is incomplete
// first, whatever saturation it also showed (the window, not the engine,
// cut it short); one that sent them and completed too few is saturated
// first where the engine's TTFT says so.
func TestDecideShortfallCause(t *testing.T) {
	for _, c := range []struct {
		sent, completed, failed int
		want                    []Verdict
	}{
		{40, 40, 0, []Verdict{VerdictIncomplete, VerdictSaturated}},
		{400, 100, 0, []Verdict{VerdictSaturated, VerdictIncomplete}},
		// Failures beyond max_error_rate are the engine's: first, even in a
		// window too short to send enough; the shortfall still before saturation.
		{40, 10, 30, []Verdict{VerdictErrors, VerdictIncomplete, VerdictSaturated}},
		{400, 100, 300, []Verdict{VerdictErrors, VerdictSaturated, VerdictIncomplete}},
	} {
		s := &RunSummary{NumPrompts: c.sent, Completed: c.completed, Saturated: true, SaturationReason: "TTFT rises through the window"}
		if c.failed > 0 {
			s.Errors = map[string]int{"http_5xx": c.failed}
		}
		Decide(s, Policy{MinCompleted: 400})
		var got []Verdict
		for _, r := range s.VerdictReasons {
			v, _, _ := strings.Cut(r, ":")
			got = append(got, Verdict(v))
		}
		if s.Verdict != c.want[0] || !slices.Equal(got, c.want) {
			t.Errorf("sent %d, completed %d, failed %d of 400: verdict %s, reasons %q; want %v", c.sent, c.completed, c.failed, s.Verdict, s.VerdictReasons, c.want)
		}
	}
}
