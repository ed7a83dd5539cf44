package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
)

// TestMain lets the test binary act as mbench when re-executed with
// MBENCH_TEST_AS_MBENCH=1: the sweep tests start the simulated engine as
// "<test binary> sim ...", exactly as a real sweep starts "mbench sim ...".
func TestMain(m *testing.M) {
	if os.Getenv("MBENCH_TEST_AS_MBENCH") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, os.Args, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "mbench:", err)
			if ec, ok := err.(exitCoder); ok {
				os.Exit(ec.ExitCode())
			}
			os.Exit(1)
		}
		os.Exit(0)
	}
	selfEnv = func() []string { return []string{"MBENCH_TEST_AS_MBENCH=1"} }
	flag.Parse()
	widenParallel()
	os.Exit(m.Run())
}

// sweepParallel is how many parallel tests run at once in a plain `go test`.
// The sweep tests spend their time waiting on load windows, engine starts
// and Slurm, not computing (the whole package: about 60 s of CPU in 250 s of
// wall on 2 cores), so running them GOMAXPROCS (2) at a time left the cores
// idle; at 8 at a time the bursts of a loaded machine pushed sweeps that
// must finish clean (a preemption-free LRU replay, long outputs) into
// machine verdicts.
const sweepParallel = 4

// widenParallel sets -test.parallel to sweepParallel unless the command
// line gave it, or MBENCH_LONG=1 runs the statistical validation sweeps,
// which keep the default (at most GOMAXPROCS sweeps beside each other).
func widenParallel() {
	if os.Getenv("MBENCH_LONG") == "1" {
		return
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if f := flag.Lookup("test.parallel"); f != nil && !given {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < sweepParallel {
			_ = f.Value.Set(strconv.Itoa(sweepParallel))
		}
	}
}

// runCLI runs mbench in-process and returns stdout, stderr and the error.
func runCLI(t *testing.T, ctx context.Context, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(ctx, append([]string{"mbench"}, args...), &out, &errb)
	return out.String(), errb.String(), err
}
