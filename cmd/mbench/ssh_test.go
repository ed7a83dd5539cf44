package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/orchestrator/hosts/sshdtest"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// The tests in this file run whole sweeps through `mbench run` against a
// REAL OpenSSH sshd on 127.0.0.1 (orchestrator/hosts/sshdtest): the
// simulated engine, the router and the probe run as the remote processes,
// started from the mbench binary that the sweep uploads. sshdtest skips
// them without sshd unless MBENCH_REQUIRE_SSHD=1.

// sshHome starts sshd and points $HOME at a temporary directory whose
// .ssh/config holds the "sshdtest" alias and whose .ssh/known_hosts holds
// the server's key (knownHosts false leaves known_hosts empty). It returns
// the server, the home directory and a remote work directory.
func sshHome(t *testing.T, knownHosts bool) (srv *sshdtest.Server, home, workdir string) {
	t.Helper()
	srv = sshdtest.Start(t)
	home = t.TempDir()
	sshDir := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(sshDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(srv.SSHConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(sshDir, "config"), string(cfg))
	kh := ""
	if knownHosts {
		kh = srv.KnownHostsLine() + "\n"
	}
	writeFile(t, filepath.Join(sshDir, "known_hosts"), kh)
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "")
	return srv, home, t.TempDir()
}

func writeFile(t *testing.T, path, data string) {
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
rates: [10, 20]
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
		if parts[0] == ".state" {
			return nil
		}
		if parts[0] == "runs" && len(parts) == 4 {
			parts[1], parts[2] = "*", "b*"
		}
		if (parts[0] == "cells" || parts[0] == "plots") && len(parts) >= 2 {
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
		if l["status"] != "ok" && l["status"] != "saturated" { // saturated: a judgement on noisy 2-core timings
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

func runSweep(t *testing.T, timeout time.Duration, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return runCLI(t, ctx, append([]string{"run"}, args...)...)
}

// TestSSHSweep runs a whole sweep on an SSH host that is not in
// known_hosts, under host_key_policy accept-new, and checks that the results
// have the file set of the same sweep run locally, that each run's step
// lines come from the remote engine's step log without overlap between runs,
// that the remote probe's host samples land in the run directory, and that
// nothing of the sweep is left running on the host.
func TestSSHSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh")
	}
	srv, home, workdir := sshHome(t, false)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, ", host_key_policy: accept-new", "")
	out := filepath.Join(dir, "out")
	stdout, stderr, err := runSweep(t, 3*time.Minute, m, "--out", out)
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
	for _, l := range strings.Split(readString(t, steps[0]), "\n") {
		remote[l] = true
	}
	enginePids := remotePids(t, filepath.Join(workdir, sweepID, "logs"))
	seen := map[string]string{}
	for _, rd := range checkSweep(t, out, 4) {
		hostsSeen := map[string]int{}
		for _, h := range readJSONL(t, filepath.Join(rd, "host.jsonl")) {
			hostsSeen[h["host"].(string)]++
		}
		if hostsSeen["gpu0"] == 0 {
			t.Errorf("%s: no host samples from the remote probe on gpu0: %v", rd, hostsSeen)
		}
		lines := strings.Split(strings.TrimSpace(readString(t, filepath.Join(rd, "engine_step.jsonl"))), "\n")
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
	body := strings.Replace(readString(t, local), "address: sshdtest", "address: local", 1)
	writeFile(t, local, body)
	lout := filepath.Join(dir, "local")
	if stdout, stderr, err := runSweep(t, 3*time.Minute, local, "--out", lout, "--quiet"); err != nil {
		t.Fatalf("local run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if a, b := strings.Join(runFiles(t, out), "\n"), strings.Join(runFiles(t, lout), "\n"); a != b {
		t.Errorf("ssh sweep files differ from a local sweep's:\nssh:\n%s\nlocal:\n%s", a, b)
	}
}

func readString(t *testing.T, path string) string {
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
	if err := json.Unmarshal([]byte(readString(t, filepath.Join(out, "sweep.json"))), &st); err != nil || st.SweepID == "" {
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
		for _, m := range simPidRe.FindAllStringSubmatch(readString(t, l), -1) {
			n, _ := strconv.Atoi(m[1])
			pids[n] = true
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no engine pids in the remote logs %v", logs)
	}
	return pids
}

// markedProcs lists the live processes whose environment carries
// MBENCH_MARKER=marker.
func markedProcs(marker string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		if st, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); strings.Contains(string(st), ") Z ") {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if kv == "MBENCH_MARKER="+marker {
				out = append(out, pid)
			}
		}
	}
	return out
}

// checkNothingLeft asserts that no process of the sweep lives on the host and
// no pidfile is left in its state directory.
func checkNothingLeft(t *testing.T, workdir, sweepID string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := markedProcs(sweepID)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of sweep %s still alive on the host: %v", sweepID, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if pf, _ := filepath.Glob(filepath.Join(workdir, sweepID, "pids", "*.pid")); len(pf) > 0 {
		t.Errorf("pidfiles left on the host: %v", pf)
	}
}

func TestSSHSweepTunnel(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh")
	}
	_, _, workdir := sshHome(t, true)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, ", tunnel: true", "")
	oneRate(t, m)
	port := matrixPort(t, m)
	out := filepath.Join(dir, "out")
	stdout, stderr, err := runSweep(t, 3*time.Minute, m, "--out", out, "--quiet")
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
func oneRate(t *testing.T, m string) {
	t.Helper()
	writeFile(t, m, strings.Replace(readString(t, m), "rates: [10, 20]", "rates: [20]", 1))
}

// TestSSHPortInUse plants a listener on the engine's port on the SSH host:
// with a tunnel a local dial would always connect, so the check must look
// at the host's own sockets, and the runs must fail naming the port.
func TestSSHPortInUse(t *testing.T) {
	_, _, workdir := sshHome(t, true)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, ", tunnel: true", "")
	oneRate(t, m)
	port := matrixPort(t, m)
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out := filepath.Join(dir, "out")
	stdout, stderr, err := runSweep(t, time.Minute, m, "--out", out, "--quiet")
	lines := readJSONL(t, filepath.Join(out, "journal.jsonl"))
	if len(lines) == 0 {
		t.Fatalf("no runs journaled: %v\n%s\n%s", err, stdout, stderr)
	}
	for _, l := range lines {
		if reason, _ := l["reason"].(string); l["status"] != "failed" || !strings.Contains(reason, "port "+port+" is already in use") {
			t.Errorf("run b%v: %v (%v), want failed: port %s in use", l["block"], l["status"], l["reason"], port)
		}
	}
	if logs, _ := filepath.Glob(filepath.Join(workdir, "*", "logs", "engine-*")); len(logs) != 0 {
		t.Errorf("an engine was started on the busy port: %v", logs)
	}
}

// matrixPort is engine.port of a matrix file written by writeMatrix.
func matrixPort(t *testing.T, path string) string {
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
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh")
	}
	_, _, workdir := sshHome(t, true)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, "", `
    topology: {instances_per_host: 3}
    router: {command: "{{.Self}} router --addr 127.0.0.1:{{.RouterPort}} {{.Targets}}", port: %RPORT%}`)
	oneRate(t, m)
	port := matrixPort(t, m)
	p, _ := strconv.Atoi(port)
	rport := strconv.Itoa(p + 5)
	b, _ := os.ReadFile(m)
	writeFile(t, m, strings.ReplaceAll(string(b), "%RPORT%", rport))
	out := filepath.Join(dir, "out")
	stdout, stderr, err := runSweep(t, 3*time.Minute, m, "--out", out, "--quiet")
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

// TestSSHConnectionCut cuts every connection of the orchestrator to sshd
// while the first run is measuring: the engine's tether must kill it on the
// host (checked by the pid in its remote pidfile, which must carry the
// sweep's MBENCH_MARKER), the run must be journaled failed, and the sweep
// must reconnect and finish its other run with nothing left behind.
func TestSSHConnectionCut(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh")
	}
	srv, _, workdir := sshHome(t, true)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, "", "")
	body := strings.NewReplacer("rates: [10, 20]", "rates: [20]",
		"min_completed: 30, timeout: 30s, drain_timeout: 5s", "min_completed: 120, timeout: 10s, drain_timeout: 2s").Replace(readString(t, m))
	writeFile(t, m, body)
	out := filepath.Join(dir, "out")
	type result struct {
		stdout, stderr string
		err            error
	}
	done := make(chan result, 1)
	go func() {
		o, e, err := runSweep(t, 3*time.Minute, m, "--out", out)
		done <- result{o, e, err}
	}()
	var pid int
	var sweepID string
	deadline := time.Now().Add(60 * time.Second)
	for pid == 0 {
		select {
		case r := <-done:
			t.Fatalf("sweep ended before the cut: %v\n%s\n%s", r.err, r.stdout, r.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run never started measuring")
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := os.Stat(filepath.Join(out, "sweep.json")); err != nil {
			continue
		}
		sweepID = sweepIDOf(t, out)
		reqs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "b1", "requests.jsonl"))
		pf, err := os.ReadFile(filepath.Join(workdir, sweepID, "pids", "engine-gpu0-0.pid"))
		if len(reqs) == 0 || err != nil {
			continue
		}
		if b, _ := os.ReadFile(reqs[0]); strings.Count(string(b), "\n") < 20 {
			continue
		}
		pid, _ = strconv.Atoi(strings.Fields(string(pf))[0])
	}
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err != nil || !strings.Contains(string(env), "MBENCH_MARKER="+sweepID+"\x00") {
		t.Fatalf("pid %d from the remote pidfile is not the sweep's engine (%v)", pid, err)
	}
	procs := markedProcs(sweepID) // the engine's group and the probe
	if len(procs) < 2 {
		t.Fatalf("only %v carry the sweep's marker; want the engine group and the probe", procs)
	}
	srv.Cut()
	cut := time.Now()
	for _, p := range procs {
		for alive(p) {
			if time.Since(cut) > 15*time.Second {
				t.Fatalf("pid %d of the sweep still alive 15 s after the connection was cut", p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("pids %v (engine pgid %d) gone %v after the cut", procs, pid, time.Since(cut).Round(time.Millisecond))
	r := <-done
	if r.err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
	}
	status := map[string]string{}
	for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
		status["b"+jsonNum(l["block"])] = fmt.Sprintf("%v: %v", l["status"], l["reason"])
	}
	if !strings.HasPrefix(status["b1"], "failed") || !strings.Contains(status["b1"], "connection lost") {
		t.Errorf("cut run b1: %s, want failed on the lost connection", status["b1"])
	}
	if !strings.HasPrefix(status["b2"], "ok") && !strings.HasPrefix(status["b2"], "saturated") {
		t.Errorf("run b2 after reconnecting: %s, want ok", status["b2"])
	}
	if srv.Accepted() < 2 {
		t.Errorf("sshd accepted %d connections: mbench did not reconnect", srv.Accepted())
	}
	checkNothingLeft(t, workdir, sweepID)
	t.Logf("journal: %v\nstderr:\n%s", status, r.stderr)
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(st), ") Z ")
}

// TestSSHHostKeys runs `mbench run` against hosts whose key is wrong or
// unknown: each must be refused before anything starts, with an error that
// says why; accept-new never overrides a mismatch. (An unknown host accepted
// under accept-new is TestSSHSweep.)
func TestSSHHostKeys(t *testing.T) {
	srv, home, workdir := sshHome(t, true)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	other, _ := ssh.NewSignerFromKey(otherKey)
	wrong := knownhosts.Line([]string{knownhosts.Normalize(srv.Addr)}, other.PublicKey()) + "\n"
	for _, tc := range []struct {
		name, knownHosts, policy string
		want                     []string
	}{
		{"mismatch", wrong, "", []string{"HOST KEY MISMATCH", filepath.Join(home, ".ssh", "known_hosts")}},
		{"mismatch accept-new", wrong, ", host_key_policy: accept-new", []string{"HOST KEY MISMATCH"}},
		{"unknown strict", "", "", []string{"is not in", "strict"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, filepath.Join(home, ".ssh", "known_hosts"), tc.knownHosts)
			dir := t.TempDir()
			m := sshMatrixFile(t, dir, workdir, tc.policy, "")
			out := filepath.Join(dir, "out")
			_, stderr, err := runSweep(t, time.Minute, m, "--out", out)
			if err == nil {
				t.Fatalf("run succeeded against a host whose key is %s", tc.name)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			if !strings.Contains(err.Error(), "gpu0") {
				t.Errorf("error does not name the host gpu0: %v", err)
			}
			if ents, _ := os.ReadDir(workdir); len(ents) != 0 {
				t.Errorf("something was created on the refused host: %v", ents)
			}
			if _, err := os.Stat(filepath.Join(out, "runs")); err == nil {
				t.Errorf("runs were attempted on a refused host")
			}
			if kh := readString(t, filepath.Join(home, ".ssh", "known_hosts")); kh != tc.knownHosts {
				t.Errorf("known_hosts changed:\n%s", kh)
			}
			t.Logf("%v\n%s", err, stderr)
		})
	}
}
