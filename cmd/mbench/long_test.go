package main

import (
	"os"
	"testing"
)

// longTest skips a long validation sweep — the method or a whole experiment
// checked end to end on the simulated engine, a minute or more of real load
// — unless MBENCH_LONG=1, which .ci/run sets. The loop behaviour these sweeps also
// go through is tested in-process (orchestrator's TestLoop*), so that
// `go test ./...` stays within minutes.
func longTest(t *testing.T) {
	t.Helper()
	if os.Getenv("MBENCH_LONG") != "1" {
		t.Skip("a long validation sweep on the simulated engine: MBENCH_LONG=1 runs it (.ci/run does)")
	}
}
