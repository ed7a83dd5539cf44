package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSSHHostLost: the SSH host stops answering mid-run (every connection
// cut, new ones black-holed, as a host that hangs or leaves the network).
// The sweep stops once a reconnection's attempts (each bounded by the host's
// connect_timeout) reach nothing, with a non-zero exit naming the lost host,
// and journals nothing for the lost run (it is no failure of the run); when
// the host answers again, resume redoes it and finishes the sweep.
func TestSSHHostLost(t *testing.T) {
	defer parallelWhenWide(t)()
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh")
	}
	srv, home, workdir := sshHome(t, true)
	dir := t.TempDir()
	m := sshMatrixFile(t, dir, workdir, ", connect_timeout: 1s", "")
	body := strings.NewReplacer("rates: [10, 20]", "rates: [20]",
		"min_completed: 30, timeout: 30s, drain_timeout: 5s", "min_completed: 120, timeout: 10s, drain_timeout: 2s").Replace(sshRead(t, m))
	sshWrite(t, m, body)
	out := filepath.Join(dir, "out")
	c := startMbenchEnv(t, t.TempDir(), sshEnv(home), "run", m, "--out", out)
	measuring := waitChild(c, time.Minute, func() bool {
		reqs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "b1", "requests.jsonl"))
		if len(reqs) == 0 {
			return false
		}
		b, _ := os.ReadFile(reqs[0])
		return strings.Count(string(b), "\n") >= 20
	})
	if !measuring {
		t.Fatalf("the first run never started measuring:\n%s", c.output())
	}
	sweepID := sweepIDOf(t, out)
	srv.Stall()
	srv.Cut()
	code := c.wait(3 * time.Minute)
	srv.Resume()
	if code == -1 {
		c.kill()
		t.Fatalf("the sweep did not stop after its host was lost:\n%s", c.output())
	}
	stderr := c.stderr.String()
	if code != exitError || !strings.Contains(stderr, "host stopped answering") || !strings.Contains(stderr, "mbench resume "+out) {
		t.Errorf("lost host: exit %d, want %d naming the lost host and the resume:\n%s", code, exitError, stderr)
	}
	if j := journaledDirs(out); len(j) != 0 {
		t.Errorf("runs journaled although their host was lost: %v", j)
	}
	// The engine's tether killed it when its connection was cut; its
	// pidfile stays until the host answers (resume clears it).
	for end := time.Now().Add(10 * time.Second); len(markedProcs(sweepID)) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("processes of the sweep alive on the lost host: %v", markedProcs(sweepID))
		}
	}

	c = startMbenchEnv(t, t.TempDir(), sshEnv(home), "resume", out)
	code = c.wait(3 * time.Minute)
	if code != 0 && code != exitNoResult {
		c.kill()
		t.Fatalf("resume once the host answers: exit %d\n%s", code, c.output())
	}
	status := map[string]string{}
	for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
		status["b"+jsonNum(l["block"])] = fmt.Sprint(l["status"])
	}
	if len(status) != 2 || status["b1"] == "failed" || status["b2"] == "failed" {
		t.Errorf("after resume: %v, want b1 and b2 run (neither failed)", status)
	}
	checkNothingLeft(t, workdir, sweepID)
}
