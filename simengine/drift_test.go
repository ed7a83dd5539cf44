package simengine

import (
	"math"
	"testing"
	"time"
)

// TestThermalDrift: with drift 1%/s and an epoch 10 s ago, a step costs
// 1.10× the model; before the epoch there is no drift.
func TestThermalDrift(t *testing.T) {
	for _, tc := range []struct {
		name  string
		epoch time.Time
		want  float64
	}{
		{"10s after epoch", time.Now().Add(-10 * time.Second), 1.10},
		{"before epoch", time.Now().Add(time.Hour), 1.0},
		{"no epoch", time.Time{}, 1.0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{StepBaseUs: 1000, Jitter: -1, DriftPerS: 0.01, DriftEpoch: tc.epoch}.withDefaults()
			m := newCostModel(cfg)
			got := m.cost(100, 0, 0, 0).total / 1000
			if math.Abs(got-tc.want) > 0.005 {
				t.Fatalf("step factor %.4f, want %.2f", got, tc.want)
			}
		})
	}
}
