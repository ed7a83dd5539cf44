package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSSHHostLost: the SSH host of config plain stops answering mid-run
// (every connection cut, new ones black-holed, as a host that hangs or
// leaves the network); config near runs on this machine. Once a
// reconnection's attempts (each bounded by the host's connect_timeout)
// reach nothing, the lost run is journaled host_lost (no failure of the
// run), near's run of the block runs all the same, and the sweep stops with
// a non-zero exit naming the lost host; when the host answers again, resume
// runs the lost run again and finishes the sweep. (Which runs of a block go
// on is orchestrator's TestLoopHostLost.)
func TestSSHHostLost(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep over ssh")
	}
	srv, home, workdir := sshHome(t, true)
	dir := t.TempDir()
	// connect_timeout bounds one dial (TCP and handshake): long enough for a
	// handshake on a loaded machine; the loss then takes 5 dials and the
	// backoff, each later command to the lost host one dial.
	m := sshMatrixFile(t, dir, workdir, ", connect_timeout: 5s", "")
	body := strings.NewReplacer("rates: [20, 40]", "rates: [20]",
		"min_completed: 30, timeout: 30s, drain_timeout: 5s", "min_completed: 80, timeout: 10s, drain_timeout: 2s",
		"hosts:\n", "hosts:\n  here: {address: local}\n",
		"  plain: {}", "  plain: {topology: {hosts: [gpu0]}}\n  near: {topology: {hosts: [here]}}").Replace(sshRead(t, m))
	sshWrite(t, m, body)
	out := filepath.Join(dir, "out")
	c := startMbenchEnv(t, t.TempDir(), sshEnv(home), "run", m, "--out", out)
	cells := map[string]string{} // cell id → config
	measuring := waitChild(c, time.Minute, func() bool {
		var st sweepRecord
		if b, err := os.ReadFile(filepath.Join(out, "sweep.json")); err != nil || json.Unmarshal(b, &st) != nil {
			return false
		}
		for _, cl := range st.Cells {
			cells[cl.ID] = cl.Config
		}
		for id, cfg := range cells {
			if cfg == "plain" {
				b, _ := os.ReadFile(filepath.Join(out, "runs", id, "b1", "requests.jsonl"))
				return strings.Count(string(b), "\n") >= 20
			}
		}
		return false
	})
	if !measuring {
		t.Fatalf("plain's first run never started measuring:\n%s", c.output())
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
	journal := func() (lines []string) {
		for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
			st := fmt.Sprint(l["status"])
			if st != "host_lost" && st != "failed" {
				st = "measured"
			}
			lines = append(lines, fmt.Sprintf("%s b%s %s", cells[fmt.Sprint(l["cell"])], jsonNum(l["block"]), st))
		}
		slices.Sort(lines)
		return lines
	}
	if j := journal(); !slices.Equal(j, []string{"near b1 measured", "plain b1 host_lost"}) {
		t.Errorf("journal after the host was lost: %v; want plain b1 host_lost and near b1 measured", j)
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
	if j := journal(); !slices.Equal(j, []string{"near b1 measured", "near b2 measured", "plain b1 host_lost", "plain b1 measured", "plain b2 measured"}) {
		t.Errorf("journal after resume: %v; want plain b1 host_lost and every run measured once", j)
	}
	checkNothingLeft(t, workdir, sweepID)
}
