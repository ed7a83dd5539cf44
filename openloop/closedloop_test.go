package openloop

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// sendTimes returns the records' SentNs in order.
func sendTimes(recs []Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.SentNs
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// TestClosedLoopKeepsNInFlight: concurrency N against a stub (20 ms to the
// first token, 4 tokens 2 ms apart): the records show exactly N in flight at
// peak and N on average between the N-th and the last send; the stub's own
// count agrees; the run sends warmup + requests; every request after the
// first N is scheduled when an earlier one finished, and sent promptly.
func TestClosedLoopKeepsNInFlight(t *testing.T) {
	for _, n := range []int{1, 4, 16} {
		s := startStub(t, stub.Options{FirstToken: 20 * time.Millisecond, Gap: 2 * time.Millisecond, Tokens: 4})
		res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "stub-model", Arrival: Arrival{Process: ArrivalConcurrency, InFlight: n},
			Shape: Shape{Input: 16, Output: 4}, Warmup: n, Requests: 6 * n, Seed: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Records) != 7*n || res.StopReason != "requests" {
			t.Fatalf("n=%d: %d records, stop %q; want %d, requests", n, len(res.Records), res.StopReason, 7*n)
		}
		if s.MaxInflight() != n {
			t.Errorf("n=%d: the stub saw %d in flight at most", n, s.MaxInflight())
		}
		sends := sendTimes(res.Records)
		peak, mean := Concurrency(res.Records, sends[n-1], sends[len(sends)-1])
		t.Logf("n=%d: peak %d, mean in flight %.4f, lag p99 %.3f ms", n, peak, mean, res.Grade.LagP99Ms)
		if peak != n || mean < 0.9*float64(n) || mean > float64(n) {
			t.Errorf("n=%d: in flight from the records: peak %d, mean %.3f; want %d", n, peak, mean, n)
		}
		var done, sched []int64
		measured := 0
		for _, r := range res.Records {
			if !r.OK() || r.SentNs < r.ScheduledNs {
				t.Fatalf("n=%d: record %+v", n, r)
			}
			done = append(done, r.DoneNs)
			sched = append(sched, r.ScheduledNs)
			if r.Phase == PhaseMeasure {
				measured++
			}
		}
		if measured != 6*n {
			t.Errorf("n=%d: %d measured, want %d", n, measured, 6*n)
		}
		sort.Slice(done, func(i, j int) bool { return done[i] < done[j] })
		sort.Slice(sched, func(i, j int) bool { return sched[i] < sched[j] })
		for k := n; k < len(sched); k++ { // the k-th slot frees after the (k−n)-th completion
			if sched[k] < done[k-n] {
				t.Errorf("n=%d: send slot %d scheduled at %d, before completion %d at %d", n, k, sched[k], k-n, done[k-n])
				break
			}
		}
		if res.Grade.KSApplicable || !(res.Offered > 0) {
			t.Errorf("n=%d: grade %+v offered %v: no KS test for a closed loop, a positive achieved rate", n, res.Grade, res.Offered)
		}
	}
}

// TestClosedLoopStopsOnMinCompletedAndDuration: the open loop's stop
// conditions hold in the closed loop.
func TestClosedLoopStopsOnMinCompletedAndDuration(t *testing.T) {
	s := startStub(t, stub.Options{FirstToken: 5 * time.Millisecond, Tokens: 2})
	base := Config{Targets: []string{s.URL}, Model: "stub-model", Arrival: Arrival{Process: ArrivalConcurrency, InFlight: 3}, Shape: Shape{Input: 8, Output: 2}, Seed: 1}
	c := base
	c.MinCompleted = 20
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, r := range res.Records {
		if r.OK() {
			ok++
		}
	}
	if res.StopReason != "min_completed" || ok < 20 || ok > 23 {
		t.Errorf("min_completed 20: stop %q, %d ok", res.StopReason, ok)
	}
	c = base
	c.Duration = 200 * time.Millisecond
	if res, err = Run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, r := range res.Records {
		last = max(last, r.ScheduledNs-res.Records[0].ScheduledNs)
	}
	if res.StopReason != "duration" || time.Duration(last) >= 200*time.Millisecond {
		t.Errorf("duration 200ms: stop %q, last scheduled %v after the first", res.StopReason, time.Duration(last))
	}
	for _, bad := range []Arrival{{Process: ArrivalConcurrency}, {Process: ArrivalPoisson, InFlight: 2}} {
		if _, err := Run(context.Background(), Config{Targets: []string{s.URL}, Arrival: bad, Rate: 1, Requests: 1, Shape: Shape{Input: 1, Output: 1}}); err == nil {
			t.Errorf("arrival %+v accepted", bad)
		}
	}
}
