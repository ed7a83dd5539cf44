package openloop

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// TestRampArrivalCounts: over 300 seeds, the arrivals of a ramped schedule
// in each sub-window of the ramp (and one after it) follow the ramp's
// integral (besides the arrival every schedule has at 0): the pooled count is within 4.5 σ of 300·(Λ(t2) − Λ(t1)), and,
// for Poisson arrivals, the counts' variance across seeds matches their
// mean (index of dispersion within [0.65, 1.35], a Poisson count's).
func TestRampArrivalCounts(t *testing.T) {
	const seeds, rate = 300, 60.0
	d := 8 * time.Second
	windows := [][2]time.Duration{{0, 2 * time.Second}, {2 * time.Second, 4 * time.Second}, {4 * time.Second, 6 * time.Second}, {6 * time.Second, d}, {d, d + 2*time.Second}}
	for _, tc := range []struct {
		name string
		a    Arrival
	}{
		{"linear from 0", Arrival{Ramp: &Ramp{Kind: RampLinear, From: 0, Duration: d}}},
		{"linear from 10", Arrival{Ramp: &Ramp{Kind: RampLinear, From: 10, Duration: d}}},
		{"exponential from 2", Arrival{Ramp: &Ramp{Kind: RampExponential, From: 2, Duration: d}}},
		{"linear down from 120", Arrival{Ramp: &Ramp{Kind: RampLinear, From: 120, Duration: d}}},
		{"gamma, exponential from 5", Arrival{Process: ArrivalGamma, Burstiness: 2, Ramp: &Ramp{Kind: RampExponential, From: 5, Duration: d}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counts := make([][]float64, len(windows))
			for seed := int64(1); seed <= seeds; seed++ {
				s, err := NewSchedule(tc.a, rate, seed)
				if err != nil {
					t.Fatal(err)
				}
				c := make([]float64, len(windows))
				for {
					off := time.Duration(s.Next())
					if off >= windows[len(windows)-1][1] {
						break
					}
					for w, win := range windows {
						if off >= win[0] && off < win[1] {
							c[w]++
						}
					}
				}
				for w := range windows {
					counts[w] = append(counts[w], c[w])
				}
			}
			for w, win := range windows {
				want := RampArrivals(*tc.a.Ramp, rate, win[0], win[1])
				mean, variance := meanVar(counts[w])
				if win[0] == 0 { // a schedule's first arrival is at 0 by construction; the rest follow the law
					mean--
				}
				// Poisson: var = mean; gamma(b=2) gaps: var ≈ mean/2.
				perSeedVar := want
				if tc.a.Process == ArrivalGamma {
					perSeedVar = want / 2
				}
				z := (mean - want) / math.Sqrt(perSeedVar/seeds)
				t.Logf("window %v–%v: mean %.2f, expected %.2f (z %.2f), dispersion %.2f", win[0], win[1], mean, want, z, variance/mean)
				if math.Abs(z) > 4.5 {
					t.Errorf("window %v–%v: %.2f arrivals per run, the ramp's integral gives %.2f (z = %.1f)", win[0], win[1], mean, want, z)
				}
				if disp := variance / mean; tc.a.Process == "" && (disp < 0.65 || disp > 1.35) {
					t.Errorf("window %v–%v: index of dispersion %.2f, want ≈ 1 (Poisson counts)", win[0], win[1], disp)
				}
			}
		})
	}
}

func meanVar(xs []float64) (mean, variance float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		variance += (x - mean) * (x - mean)
	}
	return mean, variance / float64(len(xs)-1)
}

// TestRampInverse: Λ⁻¹(Λ(t)) = t across and beyond the ramp.
func TestRampInverse(t *testing.T) {
	for _, rp := range []Ramp{{RampLinear, 0, time.Second}, {RampLinear, 7, 3 * time.Second}, {RampLinear, 50, time.Second},
		{RampExponential, 1, 2 * time.Second}, {RampExponential, 20, time.Second}, {RampExponential, 20, 5 * time.Second}} {
		m := newRampMap(rp, 20)
		for _, ts := range []float64{0, 1e-6, 0.3, 0.999, 1, 1.5, 2.5, 7} {
			if got := m.inverse(m.integral(ts)); math.Abs(got-ts) > 1e-9*(1+ts) {
				t.Errorf("%+v: inverse(integral(%v)) = %v", rp, ts, got)
			}
		}
	}
}

// TestRampPhases: a run with a ramp records its ramp requests with phase
// ramp (Ramp set), keeps them out of the measured window and counts only
// measured requests toward requests; with IncludeRamp they are measured
// (phase measure, Ramp still set) and no KS test is made.
func TestRampPhases(t *testing.T) {
	s := startStub(t, stub.Options{FirstToken: time.Millisecond, Tokens: 2})
	for _, include := range []bool{false, true} {
		d := 300 * time.Millisecond
		res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "stub-model", Rate: 100,
			Arrival: Arrival{Ramp: &Ramp{Kind: RampLinear, From: 20, Duration: d}}, IncludeRamp: include,
			Shape: Shape{Input: 8, Output: 2}, Requests: 40, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		ramp, measured, rampMeasured := 0, 0, 0
		var firstMeasure int64 = math.MaxInt64
		for _, r := range res.Records {
			start := res.Records[0].ScheduledNs
			for _, q := range res.Records {
				start = min(start, q.ScheduledNs)
			}
			inRamp := r.ScheduledNs-start < int64(d)
			if r.Ramp != inRamp {
				t.Fatalf("include %t: record %d scheduled %v in, ramp %t", include, r.ID, time.Duration(r.ScheduledNs-start), r.Ramp)
			}
			switch r.Phase {
			case PhaseRamp:
				ramp++
			case PhaseMeasure:
				measured++
				firstMeasure = min(firstMeasure, r.SentNs)
				if r.Ramp {
					rampMeasured++
				}
			}
		}
		if measured != 40 {
			t.Errorf("include %t: %d measured, want requests 40", include, measured)
		}
		if !include && (ramp < 5 || res.WindowStart.Before(res.Start.Add(time.Duration(firstMeasure)))) {
			t.Errorf("include %t: %d ramp requests; window starts %v", include, ramp, res.WindowStart.Sub(res.Start))
		}
		if include && (ramp != 0 || rampMeasured < 5 || res.Grade.KSApplicable) {
			t.Errorf("include %t: %d ramp-phase, %d ramp requests measured, KS %t", include, ramp, rampMeasured, res.Grade.KSApplicable)
		}
	}
}

// RampArrivals is the expected number of arrivals in [t1, t2] (offsets
// from the schedule's start) of a ramp to rate.
func RampArrivals(rp Ramp, rate float64, t1, t2 time.Duration) float64 {
	m := newRampMap(rp, rate)
	return m.integral(t2.Seconds()) - m.integral(t1.Seconds())
}
