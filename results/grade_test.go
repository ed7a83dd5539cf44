package results

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/openloop/stub"
)

// TestSummarizeRunCopiesGrade: a grading passed in is the summary's, even
// where the records would say otherwise.
func TestSummarizeRunCopiesGrade(t *testing.T) {
	in := knownRun()
	g := openloop.Grade{Sent: 11, LagP50Ms: 1.5, LagP99Ms: 7.25, LagMaxMs: 9, AchievedRatio: 0.97, KSApplicable: true,
		KSD: 0.2, KSP: 0.001, ClientLimited: true, Reason: "the load generator fell behind: because"}
	in.Grade = &g
	s, err := SummarizeRun(in)
	if err != nil {
		t.Fatal(err)
	}
	got := []*float64{s.SendLagP50Ms, s.SendLagP99Ms, s.SendLagMaxMs, s.AchievedSendRatio, s.KSStat, s.KSP}
	want := []float64{1.5, 7.25, 9, 0.97, 0.2, 0.001}
	for i := range got {
		if got[i] == nil || *got[i] != want[i] {
			t.Errorf("field %d = %v, want %v", i, deref(got[i]), want[i])
		}
	}
	if !s.ClientLimited || s.ClientLimitedReason != g.Reason {
		t.Errorf("client_limited=%v reason=%q", s.ClientLimited, s.ClientLimitedReason)
	}
	// Nothing sent: no lag, no KS — null, not 0.
	in.Grade = &openloop.Grade{}
	if s, _ := SummarizeRun(in); s.SendLagP99Ms != nil || s.AchievedSendRatio != nil || s.KSP != nil || s.ClientLimited {
		t.Errorf("empty grade: lag p99 %v ratio %v ks_p %v client_limited %v", deref(s.SendLagP99Ms), deref(s.AchievedSendRatio), deref(s.KSP), s.ClientLimited)
	}
}

// TestSummarizeRunGradeMatchesRun runs the load generator against the stub
// and summarizes the run as the orchestrator does (no Grade): the summary's
// grading is exactly Result.Grade, and passing Grade changes nothing.
func TestSummarizeRunGradeMatchesRun(t *testing.T) {
	srv, err := stub.Start(stub.Options{Tokens: 4, FirstToken: time.Millisecond, Burst: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, a := range []openloop.Arrival{{Process: openloop.ArrivalPoisson}, {Process: openloop.ArrivalGamma, Burstiness: 0.5}} {
		cfg := openloop.Config{Targets: []string{srv.URL}, Model: "stub-model", Rate: 150, Arrival: a,
			Shape: openloop.Shape{Input: 16, Output: 4}, Seed: 3, Warmup: 10, Duration: 400 * time.Millisecond}
		res, err := openloop.Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		in := RunInput{Cell: "c", Config: "plain", Rate: cfg.Rate, Arrival: a.Process, Burstiness: a.Burstiness,
			Records: res.Records, Start: res.Start, WindowStart: res.WindowStart, WindowEnd: res.WindowEnd,
			Offered: res.Offered, Aborted: res.Aborted, AbortReason: res.AbortReason, ClientCPUPct: res.ClientCPUPct}
		s, err := SummarizeRun(in)
		if err != nil {
			t.Fatal(err)
		}
		g := res.Grade
		if !g.KSApplicable || g.Sent < 20 {
			t.Fatalf("%s: grade %+v: want a KS test over ≥ 20 sends", a.Process, g)
		}
		pairs := []struct {
			name string
			got  *float64
			want float64
		}{{"send_lag_p50_ms", s.SendLagP50Ms, g.LagP50Ms}, {"send_lag_p99_ms", s.SendLagP99Ms, g.LagP99Ms},
			{"send_lag_max_ms", s.SendLagMaxMs, g.LagMaxMs}, {"achieved_send_ratio", s.AchievedSendRatio, g.AchievedRatio},
			{"ks_stat", s.KSStat, g.KSD}, {"ks_p", s.KSP, g.KSP}}
		for _, p := range pairs {
			if p.got == nil || *p.got != p.want {
				t.Errorf("%s: %s = %v, Result.Grade has %v", a.Process, p.name, deref(p.got), p.want)
			}
		}
		if s.ClientLimited != g.ClientLimited || s.ClientLimitedReason != g.Reason {
			t.Errorf("%s: client_limited %v %q, Result.Grade %v %q", a.Process, s.ClientLimited, s.ClientLimitedReason, g.ClientLimited, g.Reason)
		}
		in.Grade = &res.Grade
		s2, err := SummarizeRun(in)
		if err != nil {
			t.Fatal(err)
		}
		b1, _ := json.Marshal(s)
		b2, _ := json.Marshal(s2)
		if !bytes.Equal(b1, b2) {
			t.Errorf("%s: the summary differs with Grade passed:\n%s\n%s", a.Process, b1, b2)
		}
	}
}

// TestSummarizeRunKSApplicability: the cases where the fallback grading
// must not run a KS test, as Run does not.
func TestSummarizeRunKSApplicability(t *testing.T) {
	flat := func(float64) float64 { return 300 }
	trace := poissonRun(11, 300, 10, flat, true) // constant gaps: a KS test would reject
	for i := range trace.Records {
		trace.Records[i].TraceNs = trace.Records[i].ScheduledNs
	}
	noBurstiness := poissonRun(12, 300, 10, flat, true)
	noBurstiness.Arrival = "gamma" // the orchestrator passes no burstiness
	few := poissonRun(13, 19, 10, flat, true)
	upper := poissonRun(14, 300, 10, flat, true)
	upper.Arrival = "Poisson"
	cases := []struct {
		name string
		in   RunInput
		ks   bool
	}{{"trace replay, arrival left at poisson", trace, false}, {"gamma without burstiness", noBurstiness, false},
		{"19 sends", few, false}, {"Poisson in capitals", upper, true}}
	for _, c := range cases {
		s, err := SummarizeRun(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if (s.KSP != nil) != c.ks || (s.KSStat != nil) != c.ks || s.ClientLimited != c.ks {
			t.Errorf("%s: ks_stat %v ks_p %v client_limited %v (%s), want a KS test: %v", c.name, deref(s.KSStat),
				deref(s.KSP), s.ClientLimited, s.ClientLimitedReason, c.ks)
		}
		if _, err := json.Marshal(s); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// TestSummarizeRunAchievedRatio: a sender that ran 5% slow through the run
// is client-limited, and the reason says so in words.
func TestSummarizeRunAchievedRatio(t *testing.T) {
	in := poissonRun(15, 300, 10, func(float64) float64 { return 300 }, false)
	base := in.Records[0].SentNs
	for i := range in.Records {
		r := &in.Records[i]
		r.SentNs = base + int64(math.Round(float64(r.ScheduledNs-base)*1.05))
	}
	// The ratio is the share sent within the schedule's window (last
	// scheduled send + 5 ms), counted here independently.
	last, inWindow := int64(0), 0
	for _, r := range in.Records {
		last = max(last, r.ScheduledNs)
	}
	for _, r := range in.Records {
		if r.SentNs <= last+5*ms {
			inWindow++
		}
	}
	want := float64(inWindow) / float64(len(in.Records))
	s, err := SummarizeRun(in)
	if err != nil {
		t.Fatal(err)
	}
	if want > 0.99 || s.AchievedSendRatio == nil || !near(*s.AchievedSendRatio, want, 1e-9) || !s.ClientLimited ||
		!strings.Contains(s.ClientLimitedReason, "were sent within the schedule's window: requests left slower than scheduled") {
		t.Errorf("client_limited=%v reason=%q ratio %v", s.ClientLimited, s.ClientLimitedReason, deref(s.AchievedSendRatio))
	}
}
