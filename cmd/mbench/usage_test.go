package main

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestUsageErrorsTyped: a missing required flag, a format a command cannot
// print and an old flag that contradicts --format are usage errors (exit
// 2) by type, each naming the command and the flag.
func TestUsageErrorsTyped(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"trace", "sample", "--in", "big.jsonl", "--requests", "3"}, "trace sample: required flag --output not set"},
		{[]string{"load", "--base-url", "http://127.0.0.1:1", "--port", "8000", "--out", t.TempDir()}, "load: --base-url or --host/--port, not both"},
		{[]string{"steps", "--format", "xml", "steps.jsonl"}, `steps: --format "xml": valid: text, markdown, json`},
		{[]string{"trace", "stats", "--json", "--format", "text", "trace.jsonl"}, "trace stats: --json means --format json, but --format is text"},
		{[]string{"bench-load", "--format", "csv"}, `bench-load: --format "csv": valid: text, json`},
	} {
		_, _, err := runCLI(t, context.Background(), c.args...)
		var ue usageError
		if !errors.As(err, &ue) || exitCode(err) != exitUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (exit %d); want a usage error saying %q", c.args, err, exitCode(err), c.want)
		}
	}
}
