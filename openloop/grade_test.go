package openloop

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// gradeRecords builds measured records on a Poisson schedule at rate, each
// sent lag(i) ms after its time.
func gradeRecords(t *testing.T, rate float64, n int, seed int64, lag func(i int) float64) []Record {
	t.Helper()
	offs, err := Offsets(Arrival{}, rate, seed, n)
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]Record, n)
	for i, o := range offs {
		s := o + 1e6
		recs[i] = Record{ID: i, Phase: PhaseMeasure, Status: StatusOK, ScheduledNs: s, SentNs: s + int64(lag(i)*1e6)}
	}
	return recs
}

// TestGradeOneHiccupAtSmallN: 60 requests at 20–80 req/s with sub-ms lags
// and one OS stall of 13–20 ms (which puts the p99 of 60 above 5 ms) must not be
// graded client-limited, over 200 seeds.
func TestGradeOneHiccupAtSmallN(t *testing.T) {
	flagged := 0
	for seed := int64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		rate := 20 + 60*rng.Float64()
		stall, at := 13+7*rng.Float64(), rng.IntN(60)
		g := SelfGrade(gradeRecords(t, rate, 60, seed, func(i int) float64 {
			if i == at {
				return stall
			}
			return 0.1 + 0.2*rng.Float64()
		}), rate, Arrival{})
		if g.LagP99Ms <= ClientLateMs {
			t.Fatalf("seed %d: lag p99 %.2f ms; the stall must make the p99 exceed %v ms for this test to mean anything", seed, g.LagP99Ms, ClientLateMs)
		}
		if g.ClientLimited {
			flagged++
			t.Logf("seed %d: %s", seed, g.Reason)
		}
	}
	if flagged > 0 {
		t.Errorf("%d of 200 runs with one stall graded client_limited, want 0", flagged)
	}
}

// TestGradeFlagsFallingBehind: a generator that falls behind (each request
// later than the one before, as under overload) is flagged, by the late
// share and by the window, at small and large n; a run with 3% of its
// requests late by 10 ms is flagged by the late share alone.
func TestGradeFlagsFallingBehind(t *testing.T) {
	for _, n := range []int{60, 1000, 10000} {
		recs := gradeRecords(t, 1000, n, 3, func(int) float64 { return 0 })
		for i := range recs { // sent at 0.8 of the scheduled rate
			recs[i].SentNs = recs[0].ScheduledNs + (recs[i].ScheduledNs-recs[0].ScheduledNs)*5/4
		}
		g := SelfGrade(recs, 1000, Arrival{})
		if !g.ClientLimited || g.AchievedRatio >= ClientLimitedRatio || g.Late == 0 {
			t.Errorf("n=%d falling behind: %+v, want client_limited (late and slow)", n, g)
		}
	}
	g := SelfGrade(gradeRecords(t, 1000, 2000, 4, func(i int) float64 {
		if i%33 == 0 {
			return 10
		}
		return 0.1
	}), 1000, Arrival{})
	if !g.ClientLimited || g.Late != 61 {
		t.Errorf("3%% late: %+v, want client_limited with 61 late", g)
	}
}

// TestGradeKSEffectSize: at n = 10,000 and 1,000 req/s, sends paced on a
// 0.1 ms tick shift the gap law enough for the KS test to reject (p < 0.01)
// but by a distance of no practical effect: not client-limited. Sends paced
// on a 1 ms timer tick are.
func TestGradeKSEffectSize(t *testing.T) {
	for _, c := range []struct {
		tick    int64
		limited bool
	}{{100e3, false}, {1e6, true}} {
		recs := gradeRecords(t, 1000, 10000, 6, func(int) float64 { return 0 })
		for i := range recs {
			recs[i].SentNs = (recs[i].ScheduledNs + c.tick - 1) / c.tick * c.tick
		}
		g := SelfGrade(recs, 1000, Arrival{})
		if !(g.KSP < ClientLimitedKSAlpha) || g.ClientLimited != c.limited || g.Late > 0 {
			t.Errorf("tick %v ns: D=%.4f p=%.3g late %d client_limited=%v (%s); want p < %v and client_limited %v",
				c.tick, g.KSD, g.KSP, g.Late, g.ClientLimited, g.Reason, ClientLimitedKSAlpha, c.limited)
		}
	}
}

// TestGradeHealthySmallRunsRarelyFlagged: healthy runs of 60 Poisson
// requests with sub-ms lags are flagged in under 1% of 500 seeds (the KS test
// alone rejects a finite Poisson sample in 1%).
func TestGradeHealthySmallRunsRarelyFlagged(t *testing.T) {
	flagged := 0
	for seed := int64(1); seed <= 500; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 9))
		if SelfGrade(gradeRecords(t, 50, 60, seed, func(int) float64 { return 0.3 * rng.Float64() }), 50, Arrival{}).ClientLimited {
			flagged++
		}
	}
	if flagged > 2 {
		t.Errorf("%d of 500 healthy runs graded client_limited, want ≤ 2", flagged)
	}
}

// TestGradeAchievedCountsUnsentAndLate: requests never written, and requests
// written after the schedule's window, count as not sent.
func TestGradeAchievedCountsUnsentAndLate(t *testing.T) {
	recs := gradeRecords(t, 100, 100, 7, func(int) float64 { return 0.1 })
	for i := 90; i < 95; i++ {
		recs[i].SentNs = 0
	}
	for i := 95; i < 100; i++ {
		recs[i].SentNs = recs[99].ScheduledNs + 50e6
	}
	g := SelfGrade(recs, 100, Arrival{})
	if g.AchievedRatio != 0.9 || g.Sent != 95 || !g.ClientLimited {
		t.Errorf("achieved %v sent %d client_limited %v; want 0.9, 95, true", g.AchievedRatio, g.Sent, g.ClientLimited)
	}
}

// closedRecords builds a closed loop of one: n measured requests of 20 ms
// each, the next due when the last one ended (its scheduled_ns) and sent
// lag(i) ms after.
func closedRecords(n int, lag func(i int) float64) []Record {
	recs := make([]Record, n)
	due := int64(1e6)
	for i := range recs {
		sent := due + int64(lag(i)*1e6)
		recs[i] = Record{ID: i, Phase: PhaseMeasure, Status: StatusOK, ScheduledNs: due, SentNs: sent, DoneNs: sent + 20e6}
		due = recs[i].DoneNs
	}
	return recs
}

// TestGradeClosedLoopLag: a closed loop's request is due when its slot
// frees, so its send lag is time the slot stood empty, which the server
// did not get to fill: the load it held, and the run's throughput, are
// the generator's. A loop of one that leaves a 20 ms request's slot empty
// 8 ms in one send of ten (scripted records) is graded client_limited, as an
// open loop would be; sub-millisecond lags are not. Closed loops take no
// KS test (their gaps follow the completions).
func TestGradeClosedLoopLag(t *testing.T) {
	a := Arrival{Process: ArrivalConcurrency, InFlight: 1}
	if g := SelfGrade(closedRecords(200, func(i int) float64 { return 0.1 + 0.001*float64(i%7) }), 0, a); g.ClientLimited || g.KSApplicable {
		t.Errorf("sub-ms lags: client_limited %v (%s), KS applied %v; want neither", g.ClientLimited, g.Reason, g.KSApplicable)
	}
	g := SelfGrade(closedRecords(200, func(i int) float64 {
		if i%10 == 3 {
			return 8
		}
		return 0.1
	}), 0, a)
	if !g.ClientLimited || g.Late != 20 || !strings.Contains(g.Reason, "20 of 200 requests") {
		t.Errorf("8 ms lags in one send of ten: client_limited %v, %d late (%s); want client_limited by the 20 late sends", g.ClientLimited, g.Late, g.Reason)
	}
}
