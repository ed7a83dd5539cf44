package longrun

import "testing"

type recorder struct{ called bool }

func (r *recorder) Parallel() { r.called = true }

func TestParallelOnlyInAPlainRun(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want bool
	}{{"", true}, {"0", true}, {"1", false}} {
		t.Setenv("MBENCH_LONG", tc.env)
		var r recorder
		Parallel(&r)
		if r.called != tc.want || On() == tc.want {
			t.Errorf("MBENCH_LONG=%q: Parallel called %v, On %v; want called %v", tc.env, r.called, On(), tc.want)
		}
	}
}
