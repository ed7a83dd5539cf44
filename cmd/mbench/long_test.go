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

// The plain-versus-long decision is internal/longrun's, as in the other
// packages; what is this package's own is the slot count below, since its
// parallel tests are whole sweeps.

// sweepParallel is how many parallel tests run at once in a plain
// `go test`, TestBed aside. The sweep tests spend their time waiting on
// load windows, engine starts, sshd and Slurm, not computing (the whole
// package: about 80 s of CPU in 330 s of wall on 2 cores), so GOMAXPROCS
// (2) at a time leaves the cores idle; at 8 at a time the bursts of a
// loaded machine pushed sweeps that must finish clean (a preemption-free
// LRU replay, long outputs) into machine verdicts.
const sweepParallel = 4

// wide is whether this is a plain run, whose parallel tests run
// sweepParallel at a time beside TestBed (widenParallel).
var wide bool

// sweepSlots holds a token for each parallel test running in a plain run.
var sweepSlots = make(chan struct{}, sweepParallel)

// widenParallel makes a plain run wide. With MBENCH_LONG=1 (.ci/run),
// whose statistical validation sweeps measure the machine's noise, or
// with -test.parallel given, nothing changes: parallel tests run at most
// GOMAXPROCS (or the given number) at a time, and the bed, Slurm and SSH
// tests one after another (parallelWhenWide). A wide run lifts the testing
// package's own limit and counts slots itself (parallel), so that TestBed,
// the package's longest chain (its nine bed sweeps in a row), starts with
// the parallel phase instead of in whatever order that phase frees slots.
// (-v then counts a test's wait for its slot in its time.)
func widenParallel() {
	if longrun.On() {
		return
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if f := flag.Lookup("test.parallel"); f != nil && !given {
		wide = f.Value.Set("1000") == nil
	}
}

// parallel marks t parallel and returns what its test must defer. In a
// plain run t then waits for one of sweepParallel slots, freed when the
// test function returns — where the testing package frees its own, so
// that a parent's parallel subtests, which run once it has returned, are
// not kept waiting by it.
func parallel(t *testing.T) (done func()) {
	t.Helper()
	t.Parallel()
	if !wide {
		return func() {}
	}
	sweepSlots <- struct{}{}
	return func() { <-sweepSlots }
}

// parallelWhenWide is parallel for a test that waits on real processes
// (the one-node Slurm, sshd) in a plain run, where it runs beside the
// other sweeps; in CI's long run it stays serial, as it always ran there.
func parallelWhenWide(t *testing.T) (done func()) {
	t.Helper()
	if !wide {
		return func() {}
	}
	return parallel(t)
}
