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
// and journals the lost run host_lost (no failure of the run); when the host
// answers again, resume runs it again and finishes the sweep. (That the
// block goes on with the runs on other hosts is orchestrator's
// TestLoopHostLost.)
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
	if code != exitError || !strings.Contains(stderr, "host gpu0 stopped answering in block 1: 1 run journaled host_lost") || !strings.Contains(stderr, "mbench resume "+out) {
		t.Errorf("lost host: exit %d, want %d naming the lost host and the resume:\n%s", code, exitError, stderr)
	}
	if j := readJSONL(t, filepath.Join(out, "journal.jsonl")); len(j) != 1 || j[0]["status"] != "host_lost" || jsonNum(j[0]["block"]) != "1" {
		t.Errorf("journal after the host was lost: %v; want the b1 run host_lost", j)
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
	var status []string
	for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
		status = append(status, "b"+jsonNum(l["block"])+" "+fmt.Sprint(l["status"]))
	}
	if len(status) != 3 || status[0] != "b1 host_lost" || !strings.HasPrefix(status[1], "b1 ") || !strings.HasPrefix(status[2], "b2 ") ||
		strings.Contains(status[1]+status[2], "failed") || strings.Contains(status[1]+status[2], "host_lost") {
		t.Errorf("journal after resume: %v, want b1 host_lost, then b1 and b2 run (neither failed)", status)
	}
	checkNothingLeft(t, workdir, sweepID)
}
