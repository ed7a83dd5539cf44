package results

import (
	"math"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop"
)

// sloRec is a measured request sent at 1 s with the given TTFT and E2EL (ms)
// and output tokens.
func sloRec(ttft, e2el float64, out int) Record {
	sent := int64(time.Second)
	return Record{Phase: openloop.PhaseMeasure, Status: openloop.StatusOK, ScheduledNs: sent, SentNs: sent,
		FirstTokenNs: sent + int64(ttft*1e6), LastTokenNs: sent + int64(e2el*1e6), DoneNs: sent + int64(e2el*1e6),
		InputTokens: 8, OutputTokens: out}
}

func TestSLOMeets(t *testing.T) {
	for _, tc := range []struct {
		name string
		slo  SLO
		rec  Record
		want bool
	}{
		{"ttft under", SLO{TTFTMs: 100}, sloRec(99, 500, 10), true},
		{"ttft equal meets (≤)", SLO{TTFTMs: 100}, sloRec(100, 500, 10), true},
		{"ttft over", SLO{TTFTMs: 100}, sloRec(101, 500, 10), false},
		// TPOT = (500 − 100)/(11 − 1) = 40 ms.
		{"tpot equal", SLO{TPOTMs: 40}, sloRec(100, 500, 11), true},
		{"tpot over", SLO{TPOTMs: 39.9}, sloRec(100, 500, 11), false},
		{"one token: tpot is 0", SLO{TPOTMs: 0.001}, sloRec(100, 5000, 1), true},
		{"zero tokens: tpot is 0", SLO{TPOTMs: 0.001}, sloRec(100, 5000, 0), true},
		{"e2el over", SLO{E2ELMs: 499}, sloRec(100, 500, 11), false},
		{"every bound must hold", SLO{TTFTMs: 200, TPOTMs: 50, E2ELMs: 400}, sloRec(100, 500, 11), false},
		{"every bound holds", SLO{TTFTMs: 200, TPOTMs: 50, E2ELMs: 600}, sloRec(100, 500, 11), true},
		{"no first token", SLO{E2ELMs: 1e9}, func() Record { r := sloRec(100, 500, 11); r.FirstTokenNs = 0; return r }(), false},
	} {
		if got := tc.slo.meets(&tc.rec); got != tc.want {
			t.Errorf("%s: meets = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestApplySLO(t *testing.T) {
	start := time.Unix(1000, 0)
	recs := []Record{
		sloRec(50, 400, 11),  // good
		sloRec(50, 400, 11),  // good
		sloRec(300, 400, 11), // TTFT too slow
		sloRec(50, 900, 11),  // TPOT 85 ms: too slow
		{Phase: openloop.PhaseMeasure, Status: openloop.StatusError, ErrorClass: openloop.ErrClassHTTP5xx, SentNs: 1e9, ScheduledNs: 1e9},
		{Phase: openloop.PhaseMeasure, Status: openloop.StatusError, ErrorClass: openloop.ErrClassDrained, SentNs: 1e9, ScheduledNs: 1e9},
	}
	w := sloRec(10, 20, 11)
	w.Phase = openloop.PhaseWarmup // good, but not measured
	recs = append(recs, w)
	in := RunInput{Cell: "c", Records: recs, Start: start, WindowStart: start, WindowEnd: start.Add(4 * time.Second), Offered: 1,
		Policy: Policy{SLO: &SLO{TTFTMs: 200, TPOTMs: 50}, MaxErrorRate: 1, MaxErrorRateSet: true}}
	s, err := SummarizeRun(in)
	if err != nil {
		t.Fatal(err)
	}
	if s.SLOMet == nil || *s.SLOMet != 2 {
		t.Fatalf("slo_met %v, want 2", s.SLOMet)
	}
	// 2 good in a 4 s window; 2 of 5 (4 completed + 1 engine failure; the
	// drained request is the harness's cut, not an answer).
	if s.Goodput == nil || math.Abs(*s.Goodput-0.5) > 1e-12 {
		t.Errorf("request_goodput %v, want 0.5", s.Goodput)
	}
	if s.SLOAttainment == nil || math.Abs(*s.SLOAttainment-0.4) > 1e-12 {
		t.Errorf("slo_attainment %v, want 0.4", s.SLOAttainment)
	}
	m := RunMetrics(s)
	if m[MetricGoodput] != *s.Goodput || m[MetricSLOAttainment] != *s.SLOAttainment {
		t.Errorf("run metrics lack the SLO metrics: %v %v", m[MetricGoodput], m[MetricSLOAttainment])
	}
	in.Policy.SLO = nil
	if s, _ := SummarizeRun(in); s.SLO != nil || s.Goodput != nil || s.SLOAttainment != nil || s.SLOMet != nil {
		t.Errorf("without an SLO the fields must be absent: %+v", s)
	}
}
