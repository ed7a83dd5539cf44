package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/openloop/stub"
)

// TestLoadCommand drives `mbench load` against the in-tree stub with a known
// first-token delay: the files are written and the summary's TTFT matches
// the injected delay.
func TestLoadCommand(t *testing.T) {
	t.Parallel()
	srv, err := stub.Start(stub.Options{Tokens: 8, FirstToken: 20 * time.Millisecond, Gap: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "load")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout, stderr, err := runCLI(t, ctx, "load", "--url", srv.URL, "--rate", "50", "--input", "32", "--output", "8",
		"--requests", "40", "--warmup", "2", "--model", "stub-model", "--format", "json", "--out", out)
	if err := ranToEnd(t, err, out); err != nil {
		t.Fatalf("load: %v\n%s\n%s", err, stdout, stderr)
	}
	if n := len(readJSONL(t, filepath.Join(out, "requests.jsonl"))); n != 42 {
		t.Errorf("requests.jsonl has %d lines, want 42 (2 warmup + 40 measured)", n)
	}
	data, err := os.ReadFile(filepath.Join(out, "summary_A.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if s["completed"].(float64) != 40 {
		t.Errorf("completed = %v, want 40", s["completed"])
	}
	if med := s["median_ttft_ms"].(float64); med < 20 {
		t.Errorf("median TTFT %.2f ms: below the 20 ms the stub waits before its first token", med)
	}
	if !strings.Contains(stdout, `"p90_ttft_ms"`) {
		t.Errorf("the summary is not printed:\n%s", stdout)
	}
}

// TestLoadCommandBadFlags: bad input is a usage error (exit 2), never a run.
func TestLoadCommandBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"load", "--url", "http://127.0.0.1:1", "--rate", "0", "--input", "1", "--output", "1", "--requests", "1", "--out", t.TempDir()},
		{"load", "--url", "http://127.0.0.1:1", "--rate", "1", "--input", "1", "--output", "1", "--random-range-ratio", "1.5", "--out", t.TempDir()},
		{"load", "--url", "http://127.0.0.1:1", "--rate", "1", "--input", "1", "--output", "1", "--requests", "1", "--arrival", "weibull", "--out", t.TempDir()},
	} {
		_, _, err := runCLI(t, context.Background(), args...)
		ec, ok := err.(exitCoder)
		if !ok || ec.ExitCode() != 2 {
			t.Errorf("%v: err %v, want a usage error (exit 2)", args, err)
		}
	}
}

// TestEngineNeverReady: with --keep-going a config whose engine exits
// before it is ready (twice, with the same cause) fails one run with the
// command and the last lines of its log, is marked failed once on the
// terminal, and its other runs are skipped without a launch; the other
// config is measured, and the sweep exits 3 naming the cell (without
// --keep-going the sweep stops: TestStartFailureStopsTheSweep).
func TestEngineNeverReady(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := badFlagMatrix(t, dir) // 2 configs × 1 rate × 2 blocks
	out := filepath.Join(dir, "out")
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	stdout, stderr, err := runCLI(t, ctx, "run", m, "--out", out, "--keep-going")
	// The walk cell has no usable run: the sweep says which, and exits 3.
	if ec, ok := err.(exitCoder); !ok || ec.ExitCode() != exitNoResult || !strings.Contains(err.Error(), "(walk rate=20 64x8): 2 failed") {
		t.Fatalf("run: %v, want exit 3 naming the walk cell\n%s\n%s", err, stdout, stderr)
	}
	if logs := engineLogs(t, out, "token-budget"); len(logs) != 2 {
		t.Errorf("walk launched %d times, want 2 (its launch and one relaunch)", len(logs))
	}
	if n := strings.Count(stderr, "; marked failed, its other runs skipped (--keep-going)"); n != 1 {
		t.Errorf("the terminal says %d times that walk is marked failed, want once:\n%s", n, stderr)
	}
	var failed, skipped int
	for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
		reason, _ := l["reason"].(string)
		switch {
		case l["status"] != "failed":
		case strings.HasPrefix(reason, "skipped: config walk's engine failed before it was ready on 2 launches: ") && strings.Contains(reason, "token-budget"):
			skipped++
		default:
			failed++
			for _, want := range []string{"exited before it was ready", "sim --addr", "token-budget"} {
				if !strings.Contains(reason, want) {
					t.Errorf("failed run's reason lacks %q:\n%s", want, reason)
				}
			}
		}
	}
	if failed != 1 || skipped != 1 {
		t.Errorf("%d failed runs and %d skipped, want 1 and 1 (the walk config's two)", failed, skipped)
	}
}
