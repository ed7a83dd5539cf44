package simengine

import (
	"math"
	"testing"
)

// TestDriftPerRequest: with drift 1% per request, a step whose newest
// request is the 11th since launch costs 1.01^10× the model, the first
// request's steps cost the model, and no drift leaves every step alone.
func TestDriftPerRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		drift  float64
		newest uint64
		want   float64
	}{
		{"11th request", 0.01, 11, 1.1046221254112045},
		{"first request", 0.01, 1, 1.0},
		{"no request", 0.01, 0, 1.0},
		{"no drift", 0, 11, 1.0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{StepBaseUs: 1000, PrefillTokenUs: -1, DecodeSeqUs: -1, Jitter: -1, DriftPerRequest: tc.drift}.withDefaults()
			got := newCostModel(cfg).cost(100, 0, 0, 0, tc.newest).total / 1000
			if math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("step factor %.6f, want %.6f", got, tc.want)
			}
		})
	}
}

// TestDriftCountsRequestsInTheEngine: requests sent one after another on a
// drifting engine log steps that cost (1 + drift)^(n−1) times the model for
// the n-th request, whenever each was sent.
func TestDriftCountsRequestsInTheEngine(t *testing.T) {
	te := startEngine(t, Config{StepBaseUs: 1000, PrefillTokenUs: -1, DecodeSeqUs: -1, Jitter: -1, DriftPerRequest: 0.25})
	for range 3 {
		if status, out := te.post(t, `{"prompt":[1,2,3],"max_tokens":2,"ignore_eos":true}`); status != 200 {
			t.Fatalf("status %d: %s", status, out)
		}
	}
	steps := te.steps(t)
	if len(steps) != 6 {
		t.Fatalf("%d steps, want 2 per request", len(steps))
	}
	for i, s := range steps {
		if want := 1000 * math.Pow(1.25, float64(i/2)); math.Abs(s["step_duration_us"]-want) > 0.001 {
			t.Errorf("step %d: %v µs, want %v", i, s["step_duration_us"], want)
		}
	}
}
