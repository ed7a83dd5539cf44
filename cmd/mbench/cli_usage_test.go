package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/openloop/stub"
)

// Bad usage exits 2 with a message naming the flag, and prints nothing on
// stdout; mbench with no command is bad usage too (its help on stderr).
func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	trace := filepath.Join(t.TempDir(), "t.jsonl")
	writeTestFile(t, trace, []byte(`{"timestamp": 0, "input_length": 4, "output_length": 2}`+"\n"))
	load := []string{"load", "--url", "http://127.0.0.1:1", "--model", "m", "--out", t.TempDir()}
	cases := []struct {
		args []string
		want string // in the error
	}{
		{nil, "no command given"},
		{append(load, "--trace", trace, "--rate", "1", "--time-scale", "NaN"), "--time-scale NaN"},
		{append(load, "--trace", trace, "--rate", "1", "--time-scale", "Inf"), "--time-scale +Inf"},
		{append(load, "--trace", trace, "--rate", "1", "--time-scale", "-1"), "--time-scale -1"},
		{append(load, "--rate", "1", "--input", "4", "--output", "2", "--requests", "1", "--burstiness", "0.5", "--arrival", "poisson"), "--burstiness 0.5 shapes gamma arrivals"},
		{append(load, "--rate", "1", "--input", "4", "--output", "2", "--requests", "1", "--burstiness", "2", "--arrival", "constant"), "not --arrival constant"},
		{[]string{"status", "a", "b"}, "exactly one DIR"},
	}
	for _, c := range cases {
		stdout, stderr, err := runCLI(t, context.Background(), c.args...)
		if exitStatus(err) != exitUsage || !strings.Contains(err.Error(), c.want) || stdout != "" {
			t.Errorf("%v: exit %d (%v), stdout %q; want exit 2 with %q", c.args, exitStatus(err), err, stdout, c.want)
		}
		if c.args == nil && !strings.Contains(stderr, "COMMANDS") {
			t.Errorf("no command: stderr lacks the help:\n%s", stderr)
		}
	}
}

// A reused --out: a run that ends without a summary (here the endpoint
// lists no model) leaves none behind, not the earlier run's verdict ok.
func TestLoadReusedOutKeepsNoStaleSummary(t *testing.T) {
	t.Parallel()
	srv, err := stub.Start(stub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "load")
	args := []string{"load", "--rate", "50", "--input", "4", "--output", "2", "--requests", "10", "--model", "stub-model", "--out", out}
	if _, stderr, err := runSweepCLI(t, context.Background(), append(args, "--url", srv.URL)...); err != nil {
		t.Fatalf("first run: %v\n%s", err, stderr)
	}
	summary := filepath.Join(out, "summary_A.json")
	if _, err := os.Stat(summary); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if _, _, err := runCLI(t, context.Background(), append(args, "--url", srv.URL, "--model", "")...); exitStatus(err) != exitError || !strings.Contains(err.Error(), "cannot connect to "+srv.URL) {
		t.Fatalf("second run against a closed server: %v (exit %d), want exit 1: cannot connect to %s", err, exitStatus(err), srv.URL)
	}
	if _, err := os.Stat(summary); !os.IsNotExist(err) {
		t.Errorf("the first run's summary_A.json is still there after the second run ended without one (%v)", err)
	}
}
