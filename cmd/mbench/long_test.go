package main

import (
	"flag"
	"testing"

	"github.com/mbench/mbench/internal/longrun"
)

// longTest skips a long validation sweep — the method or a whole experiment
// checked end to end on the simulated engine, a minute or more of real load
// — unless MBENCH_LONG=1, which .ci/run sets. The loop behaviour these sweeps also
// go through is tested in-process (orchestrator's TestLoop*), so that
// `go test ./...` stays within minutes.
func longTest(t *testing.T) {
	t.Helper()
	if !longrun.On() {
		t.Skip("a long validation sweep on the simulated engine: MBENCH_LONG=1 runs it (.ci/run does)")
	}
}

// testParallel is how many parallel tests a plain `go test` of this package
// runs at once, where -test.parallel is not given. Its sweeps wait on load
// windows, engine starts, sshd and Slurm rather than compute, so GOMAXPROCS
// (2 on the CI machine) leaves the cores idle: the package took 339 s at 2
// and 232 s at 4 on the shared 2-core VM at load 11–20 (2026-12-06). No
// test's verdict depends on its neighbours. With MBENCH_LONG=1 (.ci/run)
// the testing package's own default stays, as when the long validation
// sweeps were checked.
const testParallel = "4"

// defaultParallel sets -test.parallel to testParallel in a plain run where
// the command line does not give it. Call it after flag.Parse.
func defaultParallel() {
	if longrun.On() {
		return
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", testParallel) // registered by the testing package before TestMain
	}
}
