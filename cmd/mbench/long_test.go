package main

import (
	"flag"
	"os"
	"strconv"
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

// sweepParallel is how many parallel tests run at once in a plain
// `go test`. The sweep tests spend their time waiting on load windows,
// engine starts, sshd and Slurm, not computing (the whole package: about
// 80 s of CPU in 330 s of wall on 2 cores), so GOMAXPROCS (2) at a time
// leaves the cores idle; at 8 at a time the bursts of a loaded machine
// pushed sweeps that must finish clean (a preemption-free LRU replay, long
// outputs) into machine verdicts.
const sweepParallel = 4

// wide is whether parallel tests run sweepParallel at a time (widenParallel).
var wide bool

// widenParallel sets -test.parallel to sweepParallel in a plain run. With
// MBENCH_LONG=1 (.ci/run), whose statistical validation sweeps measure the
// machine's noise, or with -test.parallel given, nothing changes: parallel
// tests run at most GOMAXPROCS (or the given number) at a time, and the
// bed, Slurm and SSH tests one after another (parallelWhenWide).
func widenParallel() {
	if os.Getenv("MBENCH_LONG") == "1" {
		return
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	f := flag.Lookup("test.parallel")
	if f == nil || given {
		return
	}
	if n, err := strconv.Atoi(f.Value.String()); err == nil && n < sweepParallel {
		wide = f.Value.Set(strconv.Itoa(sweepParallel)) == nil
	}
}

// parallelWhenWide marks a test that waits on real processes (the bed's
// cluster, the one-node Slurm, sshd) parallel in a plain run, where it
// runs beside the other sweeps; in CI's long run it stays serial, as it
// always ran there.
func parallelWhenWide(t *testing.T) {
	t.Helper()
	if wide {
		t.Parallel()
	}
}

// parallelWhenNarrow marks a test whose subject is a verdict that a busy
// machine moves parallel only where parallel tests run at most GOMAXPROCS
// at a time (CI's long run); in a plain run it runs before the parallel
// tests, its own parallel cases beside each other only.
func parallelWhenNarrow(t *testing.T) {
	t.Helper()
	if !wide {
		t.Parallel()
	}
}
