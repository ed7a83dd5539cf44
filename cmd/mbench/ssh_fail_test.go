package main

// Failure paths of sweeps on an SSH host (see ssh_test.go for the setup):
// a connection cut mid-run, refused host keys, a busy port.

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

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

// TestSSHPortInUse plants a listener on the engine's port on the SSH host:
// with a tunnel a local dial would always connect, so the check must look
// at the host's own sockets. A busy port stops the sweep with an error that
// names the port, journals nothing (resume redoes the run once the port is
// free), and starts no engine.
func TestSSHPortInUse(t *testing.T) {
	t.Parallel()
	_, home, workdir := sshHome(t, true)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, ", tunnel: true", "")
	sshOneRate(t, m)
	port := sshMatrixPort(t, m)
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out := filepath.Join(dir, "out")
	stdout, stderr, err := sshRunSweep(t, home, time.Minute, m, "--out", out, "--quiet")
	if err == nil || !strings.Contains(err.Error(), "port "+port+": already in use") || !strings.Contains(err.Error(), "mbench resume") {
		t.Fatalf("want the sweep stopped with port %s already in use and the resume command; got %v\n%s\n%s", port, err, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "journal.jsonl")); err == nil {
		if lines := readJSONL(t, filepath.Join(out, "journal.jsonl")); len(lines) != 0 {
			t.Errorf("runs journaled on a busy port: %v", lines)
		}
	}
	if logs, _ := filepath.Glob(filepath.Join(workdir, "*", "logs", "engine-*")); len(logs) != 0 {
		t.Errorf("an engine was started on the busy port: %v", logs)
	}
}

// TestSSHConnectionCut cuts every connection of the orchestrator to sshd
// while the first run is measuring: the engine's tether must kill it on the
// host (checked by the pid in its remote pidfile, which must carry the
// sweep's MBENCH_MARKER), the run must be journaled failed, and the sweep
// must reconnect and finish its other run with nothing left behind.
func TestSSHConnectionCut(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh")
	}
	srv, home, workdir := sshHome(t, true)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, "", "")
	body := strings.NewReplacer("rates: [20, 40]", "rates: [20]",
		"min_completed: 30, timeout: 30s, drain_timeout: 5s", "min_completed: 80, timeout: 10s, drain_timeout: 2s").Replace(sshRead(t, m))
	sshWrite(t, m, body)
	out := filepath.Join(dir, "out")
	type result struct {
		stdout, stderr string
		err            error
	}
	done := make(chan result, 1)
	go func() {
		o, e, err := sshRunSweep(t, home, 3*time.Minute, m, "--out", out)
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
		for pidAlive(p) {
			if time.Since(cut) > time.Minute { // a hang: the tether ends them on the cut
				t.Fatalf("pid %d of the sweep still alive a minute after the connection was cut", p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("pids %v (engine pgid %d) gone %v after the cut", procs, pid, time.Since(cut).Round(time.Millisecond))
	r := <-done
	status := map[string]string{}
	for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
		status["b"+jsonNum(l["block"])] = fmt.Sprintf("%v: %v", l["status"], l["reason"])
	}
	// b1 fails by design, so the sweep's exit follows from b2's record: 0
	// when b2 is usable (ok), else (timing graded it client_limited or
	// saturated) exit 3 saying no run is usable.
	if b2ok := strings.HasPrefix(status["b2"], "ok:"); b2ok && r.err != nil ||
		!b2ok && (exitStatus(r.err) != exitNoResult || !strings.Contains(r.err.Error(), "no usable run")) {
		t.Fatalf("run b2 %s, run: %v\nstdout:\n%s\nstderr:\n%s", status["b2"], r.err, r.stdout, r.stderr)
	}
	if !strings.HasPrefix(status["b1"], "failed") || !strings.Contains(status["b1"], "connection lost") {
		t.Errorf("cut run b1: %s, want failed on the lost connection", status["b1"])
	}
	if st, _, _ := strings.Cut(status["b2"], ":"); !slices.Contains(measuredStatuses, st) {
		t.Errorf("run b2 after reconnecting: %s, want it measured", status["b2"])
	}
	if srv.Accepted() < 2 {
		t.Errorf("sshd accepted %d connections: mbench did not reconnect", srv.Accepted())
	}
	checkNothingLeft(t, workdir, sweepID)
	t.Logf("journal: %v\nstderr:\n%s", status, r.stderr)
}

// alive reports whether pid exists and is not a zombie.
func pidAlive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(st), ") Z ")
}

// TestSSHHostKeys runs `mbench run` against hosts whose key is wrong or
// unknown: each must be refused before anything starts, with an error that
// says why; accept-new never overrides a mismatch. (An unknown host accepted
// under accept-new is TestSSHSweep.)
func TestSSHHostKeys(t *testing.T) {
	t.Parallel()
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
			sshWrite(t, filepath.Join(home, ".ssh", "known_hosts"), tc.knownHosts)
			dir := t.TempDir()
			m := sshMatrixFile(t, dir, workdir, tc.policy, "")
			out := filepath.Join(dir, "out")
			_, stderr, err := sshRunSweep(t, home, time.Minute, m, "--out", out)
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
			if kh := sshRead(t, filepath.Join(home, ".ssh", "known_hosts")); kh != tc.knownHosts {
				t.Errorf("known_hosts changed:\n%s", kh)
			}
			t.Logf("%v\n%s", err, stderr)
		})
	}
}
