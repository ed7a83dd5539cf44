package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/sshdtest"
)

// The tests in this file run whole sweeps through `mbench run` against a
// REAL OpenSSH sshd on 127.0.0.1 (internal/sshdtest): the
// simulated engine, the router and the probe run as the remote processes,
// started from the mbench binary that the sweep uploads. sshdtest skips
// them without sshd unless MBENCH_REQUIRE_SSHD=1.

// sshHome starts sshd and writes a temporary home directory whose
// .ssh/config holds the "sshdtest" alias and whose .ssh/known_hosts holds
// the server's key (knownHosts false leaves known_hosts empty). It returns
// the server, the home directory and a remote work directory. The test
// process's $HOME is left alone: sshRunSweep gives the home to the mbench
// it starts, so that the SSH tests can run in parallel.
func sshHome(t *testing.T, knownHosts bool) (srv *sshdtest.Server, home, workdir string) {
	t.Helper()
	return sshHomeFor(t, sshdtest.Start(t), knownHosts)
}

// sshHomeFor is sshHome for a server already started.
func sshHomeFor(t *testing.T, srv *sshdtest.Server, knownHosts bool) (_ *sshdtest.Server, home, workdir string) {
	t.Helper()
	home = t.TempDir()
	sshDir := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(sshDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(srv.SSHConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	sshWrite(t, filepath.Join(sshDir, "config"), string(cfg))
	kh := ""
	if knownHosts {
		kh = srv.KnownHostsLine() + "\n"
	}
	sshWrite(t, filepath.Join(sshDir, "known_hosts"), kh)
	return srv, home, t.TempDir()
}

// sshEnv is the environment of an mbench whose SSH client setup is home's
// (no agent).
func sshEnv(home string) []string { return []string{"HOME=" + home, "SSH_AUTH_SOCK="} }

func sshWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// sshMatrix is tinyMatrix's engine on one SSH host: 1 config × 2 rates × 2
// blocks. %HOST% is the host's extra fields, %CONFIG% the config body.
const sshMatrix = `name: sshtiny
seed: 7
hosts:
  gpu0: {address: sshdtest, workdir: '%WORKDIR%'%HOST%}
engine:
  kind: sim
  port: %PORT%
  ready_timeout: 20s
  grace: 2s
  sim: {step_base_us: 1500, decode_seq_us: 20, prefill_token_us: 0.5}
configs:
  plain: %CONFIG%
rates: [20, 40]
shapes:
  - {name: 64x8, input: 64, output: 8}
measure: {warmup_requests: 3, min_completed: 30, timeout: 30s, drain_timeout: 5s}
repeat: {min: 2, max: 2, metric: ttft_p90, rel_ci: 0.05, confidence: 0.95}
gate: {enabled: false}
probe: {interval: 200ms}
`

func sshMatrixFile(t *testing.T, dir, workdir, hostExtra, config string) string {
	t.Helper()
	if config == "" {
		config = "{}"
	}
	r := strings.NewReplacer("%WORKDIR%", workdir, "%HOST%", hostExtra, "%CONFIG%", config)
	return writeMatrix(t, dir, r.Replace(sshMatrix))
}

// runFiles lists every file of a results directory relative to it, with
// the run directories' cell and block and the per-run-varying names folded
// (runs/X/bN/f → runs/*/b*/f), so two sweeps' layouts can be compared.
func runFiles(t *testing.T, out string) []string {
	t.Helper()
	set := map[string]bool{}
	err := filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		// The report's plots draw the usable runs, which timing verdicts
		// (measuredStatuses) decide: not a file of the sweep's plumbing.
		if parts[0] == ".state" || parts[0] == "plots" {
			return nil
		}
		if parts[0] == "runs" && len(parts) == 4 {
			parts[1], parts[2] = "*", "b*"
		}
		if parts[0] == "cells" && len(parts) >= 2 {
			for i := 1; i < len(parts)-1; i++ {
				parts[i] = "*"
			}
		}
		set[strings.Join(parts, "/")] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for f := range set {
		files = append(files, f)
	}
	sort.Strings(files)
	return files
}

// checkSweep asserts the journal of a finished sweep: want runs, all ok,
// each run directory with the files of a local run and step lines from the
// engine; it returns the run directories.
func checkSweep(t *testing.T, out string, want int) []string {
	t.Helper()
	lines := readJSONL(t, filepath.Join(out, "journal.jsonl"))
	if len(lines) != want {
		t.Fatalf("journal has %d lines, want %d: %v", len(lines), want, lines)
	}
	var dirs []string
	for _, l := range lines {
		rd := filepath.Join(out, l["dir"].(string))
		dirs = append(dirs, rd)
		if st, _ := l["status"].(string); !slices.Contains(measuredStatuses, st) {
			t.Errorf("run %v b%v: status %v (%v)", l["cell"], l["block"], l["status"], l["reason"])
			continue
		}
		for _, f := range []string{"requests.jsonl", "engine_step.jsonl", "summary_A.json", "metrics.jsonl"} {
			if st, err := os.Stat(filepath.Join(rd, f)); err != nil || st.Size() == 0 {
				t.Errorf("run %s: %s missing or empty (%v)", rd, f, err)
			}
		}
	}
	for _, f := range []string{"report.md", "tables.csv", "sweep.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	return dirs
}

// sshRunSweep runs `mbench run ARGS...` as a child process with home's SSH
// setup (sshEnv), waits up to timeout, and returns its stdout, its stderr
// and the error it exited with (childErr): nil for a sweep that ran to its
// end with every run measured (ranToEnd), as runSweepCLI.
func sshRunSweep(t *testing.T, home string, timeout time.Duration, args ...string) (string, string, error) {
	t.Helper()
	c := startMbenchEnv(t, t.TempDir(), sshEnv(home), append([]string{"run"}, args...)...)
	code := c.wait(timeout)
	if code == -1 {
		c.kill()
		return c.stdout.String(), c.stderr.String(), fmt.Errorf("mbench run still running after %s, killed", timeout)
	}
	err := ranToEnd(t, childErr(code, c.stderr.String()), outOf(c.cmd.Dir, args))
	return c.stdout.String(), c.stderr.String(), err
}

// childError is the error an mbench child exited with: its exit status
// and the error it printed last ("mbench: ..." to the end of stderr).
type childError struct {
	code int
	msg  string
}

func (e childError) Error() string { return e.msg }
func (e childError) ExitCode() int { return e.code }

// childErr is nil for exit status 0, else the childError of code and stderr.
func childErr(code int, stderr string) error {
	if code == 0 {
		return nil
	}
	msg := stderr
	if i := strings.LastIndex(stderr, "mbench: "); i >= 0 && (i == 0 || stderr[i-1] == '\n') {
		msg = stderr[i+len("mbench: "):]
	}
	return childError{code, strings.TrimSpace(msg)}
}

// TestSSHSweep runs a whole sweep on an SSH host that is not in
// known_hosts, under host_key_policy accept-new, and checks that the results
// have the file set of the same sweep run locally, that each run's step
// lines come from the remote engine's step log without overlap between runs,
// that the remote probe's host samples land in the run directory, and that
// nothing of the sweep is left running on the host.
func TestSSHSweep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh")
	}
	srv, home, workdir := sshHome(t, false)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, ", host_key_policy: accept-new", "")
	out := filepath.Join(dir, "out")
	stdout, stderr, err := sshRunSweep(t, home, 3*time.Minute, m, "--out", out)
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if kh, _ := os.ReadFile(filepath.Join(home, ".ssh", "known_hosts")); !strings.Contains(string(kh), srv.KnownHostsLine()[strings.Index(srv.KnownHostsLine(), " ")+1:]) {
		t.Errorf("accept-new did not record the host key in known_hosts:\n%s", kh)
	}
	sweepID := sweepIDOf(t, out)
	steps, _ := filepath.Glob(filepath.Join(workdir, sweepID, "steps", "engine_step.*.jsonl"))
	if len(steps) != 1 {
		t.Fatalf("remote step logs %v, want 1", steps)
	}
	remote := map[string]bool{}
	for _, l := range strings.Split(sshRead(t, steps[0]), "\n") {
		remote[l] = true
	}
	enginePids := remotePids(t, filepath.Join(workdir, sweepID, "logs"))
	if logs, _ := filepath.Glob(filepath.Join(workdir, sweepID, "logs", "engine-*.log")); len(logs) == 0 || !strings.Contains(sshRead(t, logs[0]), "on http://127.0.0.1:") {
		t.Errorf("the engine on a host reached at 127.0.0.1 must bind loopback only (logs %v)", logs)
	}
	seen := map[string]string{}
	for _, rd := range checkSweep(t, out, 4) {
		hostsSeen := map[string]int{}
		for _, h := range readJSONL(t, filepath.Join(rd, "host.jsonl")) {
			hostsSeen[h["host"].(string)]++
		}
		if hostsSeen["gpu0"] == 0 {
			t.Errorf("%s: no host samples from the remote probe on gpu0: %v", rd, hostsSeen)
		}
		// What shared the run's CPUs was read on the SSH host too: the
		// engine's process tree there, without mbench's own CPU.
		var sum struct {
			Contention *struct {
				EngineHosts []struct {
					Host       string `json:"host"`
					Procs      int    `json:"procs"`
					WithMbench bool   `json:"with_mbench"`
				} `json:"engine_hosts"`
			} `json:"contention"`
		}
		if err := json.Unmarshal([]byte(sshRead(t, filepath.Join(rd, "summary_A.json"))), &sum); err != nil {
			t.Fatal(err)
		}
		if c := sum.Contention; c == nil || len(c.EngineHosts) != 1 || c.EngineHosts[0].Host != "gpu0" || c.EngineHosts[0].Procs < 1 || c.EngineHosts[0].WithMbench {
			t.Errorf("%s: contention %+v, want the engine's process tree on gpu0 without mbench's", rd, c)
		}
		lines := strings.Split(strings.TrimSpace(sshRead(t, filepath.Join(rd, "engine_step.jsonl"))), "\n")
		for _, l := range lines {
			if !remote[l] {
				t.Errorf("%s: step line not in the remote step log: %s", rd, l)
			} else if prev, dup := seen[l]; dup {
				t.Errorf("step line in two runs (%s and %s): %s", prev, rd, l)
			}
			seen[l] = rd
		}
		for _, st := range readJSONL(t, filepath.Join(rd, "engine_step.jsonl")) {
			if pid := int(st["pid"].(float64)); !enginePids[pid] {
				t.Fatalf("%s: step from pid %d, not a remote engine's (%v)", rd, pid, enginePids)
			}
		}
	}
	checkNothingLeft(t, workdir, sweepID)

	// The same sweep on the local host: the same files.
	local := sshMatrixFile(t, t.TempDir(), workdir, "", "")
	body := strings.Replace(sshRead(t, local), "address: sshdtest", "address: local", 1)
	sshWrite(t, local, body)
	lout := filepath.Join(dir, "local")
	if stdout, stderr, err := sshRunSweep(t, home, 3*time.Minute, local, "--out", lout, "--quiet"); err != nil {
		t.Fatalf("local run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if a, b := strings.Join(runFiles(t, out), "\n"), strings.Join(runFiles(t, lout), "\n"); a != b {
		t.Errorf("ssh sweep files differ from a local sweep's:\nssh:\n%s\nlocal:\n%s", a, b)
	}
}

func sshRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sweepIDOf(t *testing.T, out string) string {
	t.Helper()
	var st struct {
		SweepID string `json:"sweep_id"`
	}
	if err := json.Unmarshal([]byte(sshRead(t, filepath.Join(out, "sweep.json"))), &st); err != nil || st.SweepID == "" {
		t.Fatalf("sweep.json: %v %q", err, st.SweepID)
	}
	return st.SweepID
}

var simPidRe = regexp.MustCompile(`\(pid (\d+),`)

// remotePids collects the pids the simulated engines printed in their logs
// on the host.
func remotePids(t *testing.T, logDir string) map[int]bool {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(logDir, "engine-*.log"))
	pids := map[int]bool{}
	for _, l := range logs {
		for _, m := range simPidRe.FindAllStringSubmatch(sshRead(t, l), -1) {
			n, _ := strconv.Atoi(m[1])
			pids[n] = true
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no engine pids in the remote logs %v", logs)
	}
	return pids
}

func TestSSHSweepTunnel(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh")
	}
	_, home, workdir := sshHome(t, true)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, ", tunnel: true", "")
	sshOneRate(t, m)
	port := sshMatrixPort(t, m)
	out := filepath.Join(dir, "out")
	stdout, stderr, err := sshRunSweep(t, home, 3*time.Minute, m, "--out", out, "--quiet")
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for _, rd := range checkSweep(t, out, 2) {
		targets := requestTargets(t, rd)
		if len(targets) != 1 {
			t.Fatalf("%s: requests went to %v, want one tunnel address", rd, targets)
		}
		for tg := range targets {
			if strings.HasSuffix(tg, ":"+port) || !strings.HasPrefix(tg, "http://127.0.0.1:") {
				t.Errorf("%s: target %s is the engine's own port %s, not an SSH tunnel", rd, tg, port)
			}
		}
	}
}

// oneRate cuts a matrix written by sshMatrixFile down to one rate (two runs).
func sshOneRate(t *testing.T, m string) {
	t.Helper()
	sshWrite(t, m, strings.Replace(sshRead(t, m), "rates: [20, 40]", "rates: [20]", 1))
}

// matrixPort is engine.port of a matrix file written by writeMatrix.
func sshMatrixPort(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "port: "); ok {
			return v
		}
	}
	t.Fatal("no engine.port in " + path)
	return ""
}

// requestTargets counts the measured requests of a run per target URL.
func requestTargets(t *testing.T, runDir string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range readJSONL(t, filepath.Join(runDir, "requests.jsonl")) {
		tg, _ := r["target"].(string)
		out[tg]++
	}
	return out
}

func TestSSHRouterTopology(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh")
	}
	_, home, workdir := sshHome(t, true)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, "", `
    topology: {instances_per_host: 3}
    router: {command: "{{.Self}} router --addr 127.0.0.1:{{.RouterPort}} {{.Targets}}", port: %RPORT%}`)
	sshOneRate(t, m)
	port := sshMatrixPort(t, m)
	p, _ := strconv.Atoi(port)
	rport := strconv.Itoa(p + 5)
	b, _ := os.ReadFile(m)
	sshWrite(t, m, strings.ReplaceAll(string(b), "%RPORT%", rport))
	out := filepath.Join(dir, "out")
	stdout, stderr, err := sshRunSweep(t, home, 3*time.Minute, m, "--out", out, "--quiet")
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for _, rd := range checkSweep(t, out, 2) {
		targets := requestTargets(t, rd)
		if len(targets) != 1 || targets["http://127.0.0.1:"+rport] == 0 {
			t.Errorf("%s: requests went to %v, want only the router at :%s", rd, targets, rport)
		}
		pids := map[float64]int{}
		for _, st := range readJSONL(t, filepath.Join(rd, "engine_step.jsonl")) {
			pids[st["pid"].(float64)]++
		}
		if len(pids) != 3 {
			t.Errorf("%s: engine steps from %d pids %v, want 3 instances", rd, len(pids), pids)
		}
	}
}

// TestSSHSweepChattyLogin runs a sweep through the in-process SSH server
// with a login shell that prints noise before every command, as an rc file
// that echoes would: $HOME (for a ~ workdir with a space), uname,
// checksums, sizes and fetched files must all be read past it.
func TestSSHSweepChattyLogin(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh")
	}
	srv := sshdtest.StartFake(t)
	srv.SetLoginNoise("Welcome to gpu0!\nLast login: never\n")
	_, home, _ := sshHomeFor(t, srv, true)
	// The in-process server's commands inherit this process's $HOME (the
	// temporary home), so a ~ workdir lands there: this test sets it, and
	// so runs alone.
	t.Setenv("HOME", home)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, "~/remote work", ", tunnel: true", "")
	workdir := filepath.Join(home, "remote work")
	sshOneRate(t, m)
	out := filepath.Join(dir, "out")
	stdout, stderr, err := sshRunSweep(t, home, 3*time.Minute, m, "--out", out, "--quiet")
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	checkSweep(t, out, 2)
	if bins, _ := filepath.Glob(filepath.Join(workdir, sweepIDOf(t, out), "bin", "mbench")); len(bins) != 1 {
		t.Errorf("mbench not uploaded under the remote $HOME-relative workdir: %v", bins)
	}
	checkNothingLeft(t, workdir, sweepIDOf(t, out))
}
