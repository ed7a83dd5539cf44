package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
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
	defaultParallel()
	os.Exit(m.Run())
}

// runCLI runs mbench in-process and returns stdout, stderr and the error.
func runCLI(t testing.TB, ctx context.Context, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(ctx, append([]string{"mbench"}, args...), &out, &errb)
	return out.String(), errb.String(), err
}
