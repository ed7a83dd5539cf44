package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// missingBinaryMatrix is llama-server's matrix with a binary that is not
// installed: 3 configs × 2 rates × 2 blocks, 12 planned runs.
const missingBinaryMatrix = `name: missing
seed: 3
hosts:
  local: {address: local}
engine:
  kind: llamacpp
  command: llama-server-not-installed -m {{.Model}} --host {{.Bind}} --port {{.Port}} {{.ConfigArgs}}
  model: %MODEL%
  port: %PORT%
  ready_timeout: 20s
  grace: 2s
  restart: every_run
configs:
  np4: {args: [--parallel, "4"], topology: {gpus_per_instance: 0}}
  np1: {args: [--parallel, "1"], topology: {gpus_per_instance: 0}}
  np4_nocache: {args: [--parallel, "4", --no-cache-prompt], topology: {gpus_per_instance: 0}}
rates: [2, 8]
shapes:
  - {name: s, input: 64, output: 8}
measure: {warmup_requests: 2, min_completed: 10, timeout: 30s, drain_timeout: 5s}
repeat: {min: 2, max: 2, metric: ttft_p90}
baseline: np4
gate: {enabled: false}
`

func writeMissingBinaryMatrix(t *testing.T, dir string) string {
	t.Helper()
	model := filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(model, []byte("not read: the engine never starts"), 0o644); err != nil {
		t.Fatal(err)
	}
	return writeMatrix(t, dir, strings.ReplaceAll(missingBinaryMatrix, "%MODEL%", model))
}

// runMissingBinary runs the missing-binary matrix with the flags given,
// into out.
func runMissingBinary(t *testing.T, flags ...string) (out, stdout, stderr string, err error) {
	t.Helper()
	dir := t.TempDir()
	m := writeMissingBinaryMatrix(t, dir)
	out = filepath.Join(dir, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdout, stderr, err = runCLI(t, ctx, append([]string{"run", m, "--out", out}, flags...)...)
	return out, stdout, stderr, err
}

// engineLogs lists the engine logs of a local sweep: one per launch.
func engineLogs(t *testing.T, out string) []string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(out, ".state", "logs", "engine-*.log"))
	if err != nil {
		t.Fatal(err)
	}
	return logs
}

// TestStartFailureStopsTheSweep: an engine binary that is not installed
// fails its launch and its one relaunch with the same cause; the sweep
// stops there (2 launches for 12 planned runs), exits 1 with the cause
// from the log's last line, the log's path and the resume command, and
// journals nothing, so resume redoes the run once the binary is there.
func TestStartFailureStopsTheSweep(t *testing.T) {
	defer parallel(t)()
	out, stdout, stderr, err := runMissingBinary(t)
	if code := exitCode(err); err == nil || code != exitError {
		t.Fatalf("run: exit %d (%v), want 1\n%s\n%s", code, err, stdout, stderr)
	}
	logs := engineLogs(t, out)
	if len(logs) != 2 {
		t.Errorf("%d launches (%v), want 2: the launch and its one relaunch", len(logs), logs)
	}
	msg := err.Error()
	for _, want := range []string{
		"its engine failed before it was ready on 2 launches with the same cause: sh: 1: llama-server-not-installed: not found",
		filepath.Join(out, ".state", "logs", "engine-local-0.2.log") + ":\nsh: 1: llama-server-not-installed: not found",
		"--keep-going",
		"continue with: mbench resume " + out,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q:\n%s", want, msg)
		}
	}
	if !strings.Contains(stderr, "launching it once more") {
		t.Errorf("the relaunch is not said on the terminal:\n%s", stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "journal.jsonl")); len(strings.TrimSpace(string(b))) != 0 {
		t.Errorf("runs journaled: resume would not redo them:\n%s", b)
	}
}

// TestStartFailureKeepGoing: with --keep-going every config whose engine
// does not start is launched twice, journaled failed once with its cause,
// and its other runs are skipped without a launch; the sweep finishes with
// exit 3 (cells without a usable run).
func TestStartFailureKeepGoing(t *testing.T) {
	defer parallel(t)()
	out, stdout, stderr, err := runMissingBinary(t, "--keep-going")
	if code := exitCode(err); code != exitNoResult {
		t.Fatalf("run: exit %d (%v), want 3\n%s\n%s", code, err, stdout, stderr)
	}
	if logs := engineLogs(t, out); len(logs) != 6 {
		t.Errorf("%d launches, want 6: 2 for each of the 3 configs", len(logs))
	}
	if n := strings.Count(stderr, "marked failed, its other runs skipped (--keep-going)"); n != 3 {
		t.Errorf("the terminal says %d times that a config is marked failed, want once per config (3):\n%s", n, stderr)
	}
	if !strings.Contains(stderr, "not found") {
		t.Errorf("the terminal lacks the cause:\n%s", stderr)
	}
	var failed, skipped int
	for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
		reason, _ := l["reason"].(string)
		switch {
		case l["status"] != "failed":
			t.Errorf("run %v %v: status %v, want failed", l["cell"], l["block"], l["status"])
		case strings.HasPrefix(reason, "skipped: config ") && strings.Contains(reason, "failed before it was ready on 2 launches: sh: 1: llama-server-not-installed: not found"):
			skipped++
		case strings.Contains(reason, "on 2 launches with the same cause"):
			failed++
		default:
			t.Errorf("reason %q", reason)
		}
	}
	if failed != 3 || skipped != 9 {
		t.Errorf("%d runs failed and %d skipped, want 3 (one per config) and 9", failed, skipped)
	}
}

// TestSSHStartFailureStopsTheSweep: the same rule over SSH (the launcher
// is one code path for every kind of host): an engine that exits before it
// is ready on the remote host, with the same cause twice, stops the sweep
// after 2 launches with the cause from the remote log.
func TestSSHStartFailureStopsTheSweep(t *testing.T) {
	defer parallelWhenWide(t)()
	_, home, workdir := sshHome(t, true)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, ", tunnel: true", "{sim: {token_budget: -5}}")
	out := filepath.Join(dir, "out")
	stdout, stderr, err := sshRunSweep(t, home, time.Minute, m, "--out", out)
	if err == nil || exitCode(err) != exitError {
		t.Fatalf("run: %v, want exit 1\n%s\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"on 2 launches with the same cause", "token-budget", "mbench resume " + out} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the terminal lacks %q:\n%s", want, stderr)
		}
	}
	if logs, _ := filepath.Glob(filepath.Join(workdir, "*", "logs", "engine-*")); len(logs) != 2 {
		t.Errorf("%d launches on the host (%v), want 2", len(logs), logs)
	}
}
