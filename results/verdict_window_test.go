package results

import (
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop"
)

// longRun is n requests sent every gap, each with a 10 ms TTFT and out
// tokens itlMs apart: with long outputs the last request ends long after
// the last send.
func longRun(n int, gap time.Duration, out int, itlMs float64) RunInput {
	var recs []Record
	for i := 0; i < n; i++ {
		r := okRecord(i, int64(time.Second)+int64(i)*int64(gap), 10, out, itlMs)
		r.MaxTokens = out
		recs = append(recs, r)
	}
	last := recs[len(recs)-1].DoneNs
	return RunInput{Cell: "c", Config: "plain", Rate: 1 / gap.Seconds(), Block: 1, Arrival: "constant", Records: recs,
		Start: t0, WindowStart: t0.Add(time.Second), WindowEnd: t0.Add(time.Duration(last)), Offered: 1 / gap.Seconds(),
		Policy: Policy{MinCompleted: n}}
}

// Offered load and completion are counted over the same requests: a run
// whose outputs take as long as its send span is ok, and failures are
// errors (or nothing) on their own, never load left undone.
func TestVerdictOverTheSameWindow(t *testing.T) {
	cases := []struct {
		name    string
		in      func() RunInput
		want    Verdict
		reasons []string // each reason, in order (a prefix of each)
		thr     float64
	}{
		// 24 requests of 256 tokens at 10 ms, one every 100 ms: E2EL 2.56 s
		// against a 2.3 s send span (thr_ratio was 0.47).
		{"long outputs, E2EL beyond the send span", func() RunInput { return longRun(24, 100*time.Millisecond, 256, 10) }, VerdictOK, nil, 1},
		// vLLM-like: 512 tokens at 25 ms (E2EL 12.8 s) over a 50 s send span.
		{"512 tokens at 25 ms over 50 s", func() RunInput { return longRun(250, 200*time.Millisecond, 512, 25) }, VerdictOK, nil, 1},
		// Every 5th request an instant 400, max_error_rate 0.3: a result.
		{"a fifth fail, within max_error_rate", func() RunInput {
			in := longRun(100, 50*time.Millisecond, 64, 10)
			for i := 0; i < 100; i += 5 {
				fail(&in, i, openloop.ErrClassHTTP4xx, "HTTP 400: bad request")
				in.Records[i].DoneNs = in.Records[i].SentNs + ms
			}
			in.Policy = Policy{MinCompleted: 80, MaxErrorRate: 0.3, MaxErrorRateSet: true}
			return in
		}, VerdictOK, nil, 1},
		// The same with the default 1%: errors, and nothing else.
		{"a fifth fail, default max_error_rate", func() RunInput {
			in := longRun(100, 50*time.Millisecond, 64, 10)
			for i := 0; i < 100; i += 5 {
				fail(&in, i, openloop.ErrClassHTTP4xx, "HTTP 400: bad request")
			}
			in.Policy = Policy{MinCompleted: 80}
			return in
		}, VerdictErrors, []string{"errors: 20 of 100 measured requests failed (20 http_4xx), more than max_error_rate 0.01 allows"}, 1},
		// A fixed number of requests (mbench load --requests 30): two lost
		// to closed connections are errors, not "incomplete before
		// measure.timeout".
		{"fixed requests, two failed", func() RunInput {
			in := longRun(30, 125*time.Millisecond, 16, 5)
			fail(&in, 3, openloop.ErrClassConnReset, "connection closed before the response: EOF")
			fail(&in, 17, openloop.ErrClassConnReset, "connection closed before the response: EOF")
			in.Policy, in.StopReason = Policy{Requests: 30}, "requests"
			return in
		}, VerdictErrors, []string{"errors: 2 of 30 measured requests failed (2 connection_reset)"}, 1},
		{"fixed requests, two failed, --max-failed 0.1", func() RunInput {
			in := longRun(30, 125*time.Millisecond, 16, 5)
			fail(&in, 3, openloop.ErrClassConnReset, "EOF")
			fail(&in, 17, openloop.ErrClassConnReset, "EOF")
			in.Policy, in.StopReason = Policy{Requests: 30, MaxErrorRate: 0.1, MaxErrorRateSet: true}, "requests"
			return in
		}, VerdictOK, nil, 1},
		// A fixed number of requests, three still in flight at the drain
		// timeout: incomplete, said as what happened.
		{"fixed requests, three drained", func() RunInput {
			in := longRun(30, 125*time.Millisecond, 16, 5)
			for i := 27; i < 30; i++ {
				fail(&in, i, openloop.ErrClassDrained, "drain timeout")
			}
			in.Policy, in.StopReason = Policy{Requests: 30}, "requests"
			return in
		}, VerdictIncomplete, []string{"incomplete: 27 of the 30 measured requests asked for finished (completed or failed) when the last request had been sent; 3 were still in flight when the run ended"}, 0.9},
		// Outputs longer than the drain timeout: the last 15 requests were
		// streaming when the harness cut them. The engine kept up (not
		// saturated); the window's end is unmeasured (incomplete).
		{"drain cuts requests mid-stream", func() RunInput {
			in := longRun(80, 50*time.Millisecond, 256, 10)
			for i := 65; i < 80; i++ {
				r := &in.Records[i]
				r.Status, r.ErrorClass, r.Error = openloop.StatusError, openloop.ErrClassDrained, "drain timeout"
				r.LastTokenNs, r.DoneNs = r.FirstTokenNs+int64(time.Second), r.FirstTokenNs+int64(time.Second)
			}
			in.Policy.MinCompleted = 20
			return in
		}, VerdictIncomplete, []string{"incomplete: 15 measured requests were still streaming when the harness ended the run (measure.drain_timeout, or a stop): the engine was serving them"}, 1},
		// Every request fails: errors, said once (not also "incomplete").
		{"every request fails", func() RunInput {
			in := longRun(30, 125*time.Millisecond, 16, 5)
			for i := range in.Records {
				fail(&in, i, openloop.ErrClassHTTP5xx, "HTTP 500")
			}
			return in
		}, VerdictErrors, []string{"errors: 30 of 30"}, -1},
		// The run aborted for failures: one reason, errors.
		{"aborted for failures", func() RunInput {
			in := longRun(30, 125*time.Millisecond, 16, 5)
			for i := 0; i < 20; i++ {
				fail(&in, i, openloop.ErrClassHTTP5xx, "HTTP 500")
			}
			in.Aborted, in.AbortCause, in.AbortReason = true, openloop.AbortFailures, "too many failures"
			in.Policy.MinCompleted = 30
			return in
		}, VerdictErrors, []string{"errors: 20 of 30"}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := SummarizeRun(c.in())
			if err != nil {
				t.Fatal(err)
			}
			if s.Verdict != c.want || len(s.VerdictReasons) != len(c.reasons) {
				t.Fatalf("verdict %s, reasons %q; want %s with %d reasons %q", s.Verdict, s.VerdictReasons, c.want, len(c.reasons), c.reasons)
			}
			for i, r := range c.reasons {
				if !strings.HasPrefix(s.VerdictReasons[i], r) {
					t.Errorf("reason %d %q, want it to start %q", i, s.VerdictReasons[i], r)
				}
			}
			switch {
			case c.thr < 0 && s.ThrRatio != nil:
				t.Errorf("thr_ratio %v with nothing completed, want null", *s.ThrRatio)
			case c.thr >= 0 && (s.ThrRatio == nil || !near(*s.ThrRatio, c.thr, 1e-9)):
				t.Errorf("thr_ratio %v, want %v", deref(s.ThrRatio), c.thr)
			}
		})
	}
}

// Requests whose token counts the stream did not vouch for mark the run:
// counted in the summary. Outputs the engine cut short with fixed lengths
// make the run short_outputs — how many, how short, the finish reasons —
// unless the policy allows them.
func TestUsageMarks(t *testing.T) {
	in := longRun(40, 100*time.Millisecond, 8, 10)
	for i := 0; i < 10; i++ {
		in.Records[i].UsageMissing = true
	}
	in.Records[20].OutputTokens, in.Records[21].OutputTokens = 5, 7
	in.Records[20].FinishReason, in.Records[21].FinishReason = "stop", "stop"
	s, err := SummarizeRun(in)
	if err != nil {
		t.Fatal(err)
	}
	const why = "short_outputs: 2 of 40 completed measured requests ended before the tokens asked for with fixed lengths (on average 75.0% of them; finish reasons: 2 stop); e.g. request 20: 5 of the 8 tokens asked for"
	if s.Verdict != VerdictShortOutputs || len(s.VerdictReasons) != 1 || !strings.HasPrefix(s.VerdictReasons[0], why) ||
		s.UsageMissing != 10 || s.ShortOutputs != 2 || s.ShortOutputFinish["stop"] != 2 {
		t.Errorf("verdict %s %q usage_missing %d short %d finish %v; want short_outputs %q", s.Verdict, s.VerdictReasons, s.UsageMissing, s.ShortOutputs, s.ShortOutputFinish, why)
	}
	in.Policy.AllowShortOutputs = true
	if s, _ = SummarizeRun(in); s.Verdict != VerdictOK || s.ShortOutputs != 2 {
		t.Errorf("allowed: verdict %s short %d, want ok and 2", s.Verdict, s.ShortOutputs)
	}
	in.Policy.AllowShortOutputs = false
	// With natural lengths max_tokens is only a cap: shorter is normal.
	in.NaturalLength = true
	if s, _ = SummarizeRun(in); s.ShortOutputs != 0 || s.UsageMissing != 10 {
		t.Errorf("natural lengths: short %d usage_missing %d, want 0 and 10", s.ShortOutputs, s.UsageMissing)
	}
}
