package results

import "testing"

// The GPU-time words of the per-step table, per path.
func TestStepGPUTime(t *testing.T) {
	v := func(x float64) MetricStats { return MetricStats{Mean: &x} }
	for _, tc := range []struct {
		name string
		m    map[string]MetricStats
		want string
	}{
		{"step path", map[string]MetricStats{"execute_us_p50": v(900), "batch_queue_steps": v(0)}, "inside execute_us (step())"},
		{"batch queue", map[string]MetricStats{"launch_us_p50": v(150), "wait_us_p50": v(300), "batch_queue_steps": v(120)}, "wait_us, when > 0 (batch queue)"},
		{"batch queue without wait", map[string]MetricStats{"launch_us_p50": v(150), "batch_queue_steps": v(120)}, "not measured (batch queue, no wait_us)"},
		{"seed 001 log", map[string]MetricStats{"build_meta_us_p50": v(60)}, "not measured"},
	} {
		if got := stepGPUTime(tc.m); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
