package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/hangguard"
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

// writeMissingBinaryMatrix writes the matrix with model as engine.model
// ("" = a file that exists).
func writeMissingBinaryMatrix(t *testing.T, dir, model string) string {
	t.Helper()
	if model == "" {
		model = filepath.Join(dir, "model.gguf")
		if err := os.WriteFile(model, []byte("not read: the engine never starts"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return writeMatrix(t, dir, strings.ReplaceAll(missingBinaryMatrix, "%MODEL%", model))
}

// lineOf is the line of the first line of the file at path that contains
// s (0: none).
func lineOf(t *testing.T, path, s string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	return 0
}

// TestMissingBinaryRefusedBeforeALaunch: `mbench run` checks the engine
// binary on the host's PATH before it starts anything: the matrix whose
// binary is not installed exits 1 with "not found" and the command's
// file:line, and launches nothing (no results directory).
func TestMissingBinaryRefusedBeforeALaunch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := writeMissingBinaryMatrix(t, dir, "")
	out := filepath.Join(dir, "out")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdout, stderr, err := runCLI(t, ctx, "run", m, "--out", out)
	if err == nil || exitCode(err) != exitError {
		t.Fatalf("run: exit %d (%v), want 1\n%s\n%s", exitCode(err), err, stdout, stderr)
	}
	want := fmt.Sprintf("%s:%d: engine.command: host local: \"llama-server-not-installed\"", m, lineOf(t, m, "command:"))
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"not found"`) || !strings.Contains(err.Error(), "nothing was started") {
		t.Errorf("error %q\nwant it to hold %q, \"not found\" and that nothing was started", err, want)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a results directory was made: the sweep began")
	}
}

// TestValidateRefusals: validate refuses, each with its file:line, a sim
// flag the simulated engine does not know (with the nearest name), a model
// file that is not there, an engine binary not on the host's PATH and a
// port another process holds; --offline still checks the local host but
// dials no remote one, which validate without it must reach.
func TestValidateRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	check := func(name string, args []string, code int, want string) {
		t.Helper()
		_, stderr, err := runCLI(t, ctx, append([]string{"validate"}, args...)...)
		if got := exitCode(err); err == nil && code != 0 || err != nil && got != code {
			t.Errorf("%s: exit %d (%v), want %d\n%s", name, got, err, code, stderr)
			return
		}
		if want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: error %v\nwant it to hold %q", name, err, want)
		}
	}

	typo := writeMatrix(t, t.TempDir(), strings.Replace(tinyMatrix, "prefill_token_us: 0.5", "prefil_token_us: 0.5", 1))
	check("sim flag typo", []string{typo}, exitUsage,
		fmt.Sprintf("%s:%d: engine.sim.prefil_token_us: unknown sim flag (did you mean \"prefill_token_us\"?)", typo, lineOf(t, typo, "prefil_token_us")))

	sub := t.TempDir()
	noModel := writeMissingBinaryMatrix(t, sub, filepath.Join(sub, "no-such-model.gguf"))
	check("missing model", []string{"--offline", noModel}, exitError,
		fmt.Sprintf("%s:%d: engine.model: host local has no %s", noModel, lineOf(t, noModel, "model:"), filepath.Join(sub, "no-such-model.gguf")))
	check("missing binary", []string{"--offline", noModel}, exitError,
		fmt.Sprintf("%s:%d: engine.command: host local: \"llama-server-not-installed\"", noModel, lineOf(t, noModel, "command:")))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	busy := writeMatrix(t, t.TempDir(), regexp.MustCompile(`port: %PORT%`).ReplaceAllString(tinyMatrix, fmt.Sprintf("port: %d", port)))
	check("port in use", []string{busy}, exitError,
		fmt.Sprintf("%s:%d: engine.port: host local: port %d (config plain) is already in use (a listening socket)", busy, lineOf(t, busy, "port:"), port))

	// An SSH host on a closed port: only a check that dials it can fail.
	remote := writeMatrix(t, t.TempDir(), strings.Replace(strings.Replace(missingBinaryMatrix, "local: {address: local}", "gpu0: {address: '127.0.0.1:1', workdir: /tmp/w}", 1),
		"%MODEL%", "/models/m.gguf", 1))
	check("unreachable host, offline", []string{"--offline", remote}, 0, "")
	check("unreachable host", []string{remote}, exitError, fmt.Sprintf("%s:%d: hosts.gpu0: cannot reach the host to check it", remote, lineOf(t, remote, "gpu0:")))
	check("valid", []string{writeMatrix(t, t.TempDir(), tinyMatrix)}, 0, "")
}

// TestSSHValidateChecksTheHost: over SSH the binary and the model file are
// looked for on the host itself (command -v and test -e through sshd), so
// a binary that is on this machine's PATH but not on the host's is
// refused there.
func TestSSHValidateChecksTheHost(t *testing.T) {
	t.Parallel()
	_, home, workdir := sshHome(t, true)
	dir := t.TempDir()
	body := strings.NewReplacer("local: {address: local}", "gpu0: {address: sshdtest, workdir: '"+workdir+"'}",
		"llama-server-not-installed", "sh", "%MODEL%", filepath.Join(dir, "model.gguf")).Replace(missingBinaryMatrix)
	m := writeMatrix(t, dir, body)
	c := startMbenchEnv(t, dir, sshEnv(home), "validate", m)
	if code := c.wait(time.Minute); code != exitError || !strings.Contains(c.stderr.String(), "engine.model: host gpu0 has no "+filepath.Join(dir, "model.gguf")) {
		t.Errorf("validate with a model file missing on the host: exit %d\n%s", code, c.stderr.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "model.gguf"), nil, 0o644); err != nil { // sshd's host is this machine
		t.Fatal(err)
	}
	c = startMbenchEnv(t, dir, sshEnv(home), "validate", m)
	if code := c.wait(time.Minute); code != 0 {
		t.Errorf("validate with sh and the model on the host: exit %d\n%s", code, c.stderr.String())
	}
	sshWrite(t, m, strings.Replace(sshRead(t, m), "command: sh ", "command: sh-not-on-the-host ", 1))
	c = startMbenchEnv(t, dir, sshEnv(home), "validate", m)
	if code := c.wait(time.Minute); code != exitError || !strings.Contains(c.stderr.String(), `engine.command: host gpu0: "sh-not-on-the-host"`) {
		t.Errorf("validate with a binary missing on the host: exit %d\n%s", code, c.stderr.String())
	}
}

// engineLogs lists the engine logs of a local sweep that hold s: one per
// launch.
func engineLogs(t *testing.T, out, s string) []string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(out, ".state", "logs", "engine-*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var with []string
	for _, l := range logs {
		if b, _ := os.ReadFile(l); strings.Contains(string(b), s) {
			with = append(with, l)
		}
	}
	return with
}

// badFlagMatrix is tinyMatrix with a walk config whose engine refuses its
// flag's value and exits before it is ready (a flag the preflight cannot
// judge: the value, not the name, is wrong).
func badFlagMatrix(t *testing.T, dir string) string {
	t.Helper()
	return writeMatrix(t, dir, strings.Replace(strings.Replace(tinyMatrix, "rates: [20, 40]", "rates: [20]", 1),
		"walk_ns_per_block: 2000}", "walk_ns_per_block: 2000, token_budget: -5}", 1))
}

// TestStartFailureStopsTheSweep: a config whose engine exits before it is
// ready fails its launch and its one relaunch with the same cause; the
// sweep stops there (2 launches of it), exits 1 with the cause from the
// log's last line, the log's path and the resume command, and journals
// none of its runs, so resume redoes it once fixed.
func TestStartFailureStopsTheSweep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := badFlagMatrix(t, dir)
	out := filepath.Join(dir, "out")
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	stdout, stderr, err := runCLI(t, ctx, "run", m, "--out", out)
	if err == nil || exitCode(err) != exitError {
		t.Fatalf("run: exit %d (%v), want 1\n%s\n%s", exitCode(err), err, stdout, stderr)
	}
	logs := engineLogs(t, out, "token-budget")
	if len(logs) != 2 {
		t.Fatalf("%d launches of walk (%v), want 2: the launch and its one relaunch", len(logs), logs)
	}
	msg := err.Error()
	for _, want := range []string{
		"config walk: its engine failed before it was ready on 2 launches with the same cause: ",
		"last lines of " + logs[1] + ":\n",
		"token-budget",
		"--keep-going",
		"continue with: mbench resume " + out,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q:\n%s", want, msg)
		}
	}
	if !strings.Contains(stderr, "config walk: the engine failed before it was ready (") || !strings.Contains(stderr, "launching it once more") {
		t.Errorf("the relaunch is not said on the terminal:\n%s", stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "journal.jsonl")); err != nil {
		return // walk ran first: nothing journaled
	}
	for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
		if l["status"] == "failed" {
			t.Errorf("a failed run journaled: resume would not redo it: %v", l)
		}
	}
}

// TestSSHStartFailureStopsTheSweep: the same rule over SSH (the launcher
// is one code path for every kind of host): an engine that exits before it
// is ready on the remote host, with the same cause twice, stops the sweep
// after 2 launches with the cause from the remote log.
func TestSSHStartFailureStopsTheSweep(t *testing.T) {
	t.Parallel()
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

// TestStartingMatricesValidate: matrices/ holds a matrix to start from for
// each kind of host, and each passes validate's checks that need no host
// (--offline): the local sim demo, vLLM over SSH, on one Slurm node and on
// several.
func TestStartingMatricesValidate(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"sim.yaml", "vllm-ssh.yaml", "vllm-slurm.yaml", "vllm-slurm-2nodes.yaml"} {
		stdout, stderr, err := runCLI(t, context.Background(), "validate", "--offline", filepath.Join("..", "..", "matrices", f))
		if err != nil || !strings.Contains(stdout, "config plain") {
			t.Errorf("validate --offline %s: %v\n%s\n%s", f, err, stdout, stderr)
		}
	}
}

// TestSlurmStartFailureStopsTheSweep: the same rule on a Slurm host (engines
// are srun steps of the sweep's allocation): two instances whose engine
// exits before it is ready with the same cause on the launch and its
// relaunch stop the sweep, exit 1, with the cause; the allocation ends with
// mbench.
func TestSlurmStartFailureStopsTheSweep(t *testing.T) {
	requireSlurm(t)
	dir := t.TempDir()
	m := filepath.Join(dir, "m.yaml")
	writeSimMatrix(t, m, map[string]string{"%NAME%": "slurmfail", "%ENV%": slurmEngine, "%BLOCKS%": "1", "%RATES%": "40",
		"%CONFIGS%": "  plain: {topology: {instances_per_host: 2, gpus_per_instance: 1}, sim: {token_budget: -5}}"})
	out := filepath.Join(dir, "out")
	c := startMbench(t, dir, "run", m, "--out", out)
	if code := c.wait(3 * time.Minute); code != exitError {
		c.kill()
		t.Fatalf("run: exit %d, want 1\n%s", code, c.output())
	}
	for _, want := range []string{"config plain: its engine failed before it was ready on 2 launches with the same cause", "token-budget", "mbench resume " + out} {
		if !strings.Contains(c.stderr.String(), want) {
			t.Errorf("the terminal lacks %q:\n%s", want, c.stderr.String())
		}
	}
	if logs := engineLogs(t, out, "token-budget"); len(logs) < 2 || len(logs) > 4 {
		t.Errorf("%d engine logs with the cause (%v), want the 2 launches' (of 2 instances each at most)", len(logs), logs)
	}
	if job := slurmJob(out); job != "" {
		checkSlurmTeardown(t, out, job)
	}
}
