package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignalsTearDown: SIGQUIT mid-sweep tears down like SIGTERM (exit 130,
// no engine left, no goroutine dump); SIGPIPE, sent or raised by a write to
// a stdout whose reader went away (mbench run … | head), kills nothing: the
// sweep finishes and its engines are gone.
func TestSignalsTearDown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("signal sweeps")
	}
	dir := t.TempDir()
	m := filepath.Join(dir, "m.yaml")
	writeSimMatrix(t, m, map[string]string{"%RATES%": "40", "%BLOCKS%": "1"})

	out := filepath.Join(dir, "quit")
	t.Cleanup(func() { killMarked(out) })
	c := startMbench(t, dir, "run", m, "--out", out, "--quiet")
	if !waitChild(c, 2*time.Minute, func() bool { return len(pidfileProcs(t, out)) > 0 }) {
		t.Fatalf("no engine came up:\n%s", c.output())
	}
	if err := c.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	if code := c.wait(time.Minute); code != exitInterrupted {
		t.Errorf("SIGQUIT: exit %d, want %d\n%s", code, exitInterrupted, c.output())
	}
	if o := c.output(); strings.Contains(o, "goroutine ") || !strings.Contains(o, "mbench: interrupted (SIGQUIT): stopping the load and tearing down engines") {
		t.Errorf("SIGQUIT output:\n%s", o)
	}
	assertNoEngines(t, out, 3*time.Second)

	// stdout is a pipe whose reader has gone: the "report:" line mbench
	// writes at the end meets a closed pipe, and a SIGPIPE comes mid-sweep.
	out = filepath.Join(dir, "pipe")
	t.Cleanup(func() { killMarked(out) })
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	cmd := exec.Command(os.Args[0], "run", m, "--out", out, "--quiet")
	cmd.Dir, cmd.Stdout = dir, w
	var stderr lockedBuf
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "MBENCH_TEST_AS_MBENCH=1", "MBENCH_TEST_MAIN=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for len(pidfileProcs(t, out)) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGPIPE)
	var werr error
	select {
	case werr = <-done:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the sweep did not finish:\n%s", stderr.String())
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("mbench died of %v:\n%s", ws.Signal(), stderr.String())
	}
	// The sweep ran to its end: every run journaled.
	if len(journaledDirs(out)) != 2 {
		t.Errorf("after SIGPIPE: %d runs journaled, exit %v:\n%s", len(journaledDirs(out)), werr, stderr.String())
	}
	assertNoEngines(t, out, 3*time.Second)
}

// TestInterruptNotice: each command speaks of itself on the first signal;
// one that starts nothing exits at once.
func TestInterruptNotice(t *testing.T) {
	for _, c := range []struct {
		args []string
		sig  os.Signal
		want string
		now  bool
	}{
		{[]string{"mbench", "validate", "m.yaml"}, os.Interrupt, "mbench validate: interrupted: stopped (it starts nothing, so there is nothing to tear down)", true},
		{[]string{"mbench", "status", "out"}, syscall.SIGTERM, "mbench status: interrupted (SIGTERM): stopped (it starts nothing", true},
		{[]string{"mbench", "run", "m.yaml"}, syscall.SIGQUIT, "mbench: interrupted (SIGQUIT): stopping the load and tearing down engines", false},
		{[]string{"mbench", "load", "--url", "u"}, os.Interrupt, "mbench load: interrupted: stopping the load; the requests measured so far are written", false},
		{[]string{"mbench", "sim", "--addr", "x"}, syscall.SIGTERM, "mbench sim: stopping on SIGTERM", false},
		{[]string{"mbench", "router"}, syscall.SIGTERM, "mbench router: stopping on SIGTERM", false},
	} {
		msg, now := interruptNotice(commandName(c.args), c.sig)
		if !strings.HasPrefix(msg, c.want) || now != c.now {
			t.Errorf("%v on %v: %q (exit at once %v), want %q (%v)", c.args, c.sig, msg, now, c.want, c.now)
		}
	}
}
