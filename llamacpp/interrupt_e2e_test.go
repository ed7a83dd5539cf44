package llamacpp_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/internal/longrun"
)

// lines counts the lines of a file (0 when it does not exist).
func lines(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("\n"))
}

// waitFor polls cond at growing intervals (the event itself, not a fixed
// sleep) until it holds, and fails the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for wait := 5 * time.Millisecond; !cond(); wait = min(2*wait, 200*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", limit, what)
		}
		time.Sleep(wait)
	}
}

// measuring reports whether a run of the sweep in out has sent requests
// that llama-server answered (a requests.jsonl with a line) while the
// server serving model is up.
func measuring(out, model string) bool {
	if len(serving(model)) == 0 {
		return false
	}
	files, _ := filepath.Glob(filepath.Join(out, "runs", "*", "b*", "requests.jsonl"))
	return slices.ContainsFunc(files, func(f string) bool { return lines(f) > 0 })
}

// TestInterruptAndResumeAgainstLlamaServer: Ctrl-C in the middle of a
// measured run stops the load, stops llama-server and exits 130 with the
// resume command; kill -9 of mbench in the middle of a run leaves the
// engine behind (local engines outlive mbench by design) and `mbench
// resume` stops it, runs what is left and ends with no llama-server.
//
// In a plain run it runs beside the package's other waiting tests (each
// its own server and port block); serial in CI's long run. (Beside them,
// resume's relaunch once found the port of the leftover engine it had just
// stopped still held: a launch now waits for its port to free,
// orchestrator.awaitFreePort.)
func TestInterruptAndResumeAgainstLlamaServer(t *testing.T) {
	longrun.Parallel(t)
	bin := findServer(t)
	mdl := model(t)
	mat := testMatrix(t, bin, mdl, func(m map[string]any) {
		cfgs := m["configs"].(map[string]any)
		delete(cfgs, "np4_nocache")
		m["rates"] = []any{8}
		m["measure"] = map[string]any{"warmup_requests": 0, "min_completed": 20, "timeout": "60s", "drain_timeout": "2m"}
	})
	start := func(args ...string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(mbenchBin(t), args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd, &out
	}
	exitOf := func(cmd *exec.Cmd, out *bytes.Buffer, limit time.Duration) int {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode()
			}
			return 0
		case <-time.After(limit):
			t.Fatalf("mbench still running %v after the signal:\n%s", limit, out)
			return -1
		}
	}

	// Ctrl-C.
	out1 := filepath.Join(t.TempDir(), "interrupted")
	cmd, log := start("run", mat, "--out", out1)
	waitFor(t, 2*time.Minute, "no measured run under way", func() bool { return measuring(out1, mdl) })
	engines := serving(mdl)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(cmd, log, 30*time.Second); code != 130 || !strings.Contains(log.String(), "mbench resume") {
		t.Errorf("after Ctrl-C: exit %d, want 130 with the resume command:\n%s", code, log)
	}
	if left := serving(mdl); len(left) > 0 {
		t.Errorf("after Ctrl-C and mbench's exit, llama-server pids %v (of %v) still serve", left, engines)
	}

	// kill -9, then resume.
	out2 := filepath.Join(t.TempDir(), "killed")
	cmd, log = start("run", mat, "--out", out2)
	journal := filepath.Join(out2, "journal.jsonl")
	waitFor(t, 3*time.Minute, "no run finished, or none measuring after it", func() bool {
		return lines(journal) >= 1 && measuring(out2, mdl)
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exitOf(cmd, log, 10*time.Second)
	orphans := serving(mdl)
	t.Logf("after kill -9: %d of 4 runs journaled, llama-server pids %v left (local engines outlive mbench; resume finds them)", lines(journal), orphans)
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	code, rlog := mbench(t, ctx, "resume", out2)
	if code != 0 && code != 3 {
		t.Fatalf("mbench resume exit %d:\n%s", code, rlog)
	}
	if n := lines(journal); n != 4 {
		t.Errorf("after resume the journal has %d runs, want all 4:\n%s", n, rlog)
	}
	if left := serving(mdl); len(left) > 0 {
		t.Errorf("after resume, llama-server pids %v still serve (%v were left by kill -9)", left, orphans)
	}
}
