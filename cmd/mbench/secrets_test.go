package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestSecretsNeverWritten plants a secret of every shape in a sim matrix —
// env values secret by name (HF_TOKEN) and by secret: true, a header value,
// the API key read from request.api_key_env's variable, a URL's password in
// metadata — beside short secret values that occur in the file as other
// fields' text ("false", "2") and a setting whose name only looks like a
// secret's (TOKENIZERS_PARALLELISM: "false"). It checks that the values
// reach the engine, that the sweep runs and its records hold the settings
// unaltered, then greps every file under the results directory (.state logs
// included) and the output of validate, run --dry-run, run and export for
// the distinctive ones.
func TestSecretsNeverWritten(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("secrets sweep")
	}
	const tok, other, header, apiKey, pass = "s3cr3t-planted-value", "other-planted", "sk-head3r-planted", "sk-envkey-planted", "pa55-planted"
	secrets := []string{tok, other, header, apiKey, pass}
	dir := t.TempDir()
	m, out := filepath.Join(dir, "m.yaml"), filepath.Join(dir, "out")
	writeSimMatrix(t, m, map[string]string{
		"%ENV%": "  env:\n    HF_TOKEN: " + tok + "\n    TOKENIZERS_PARALLELISM: \"false\"\n    FLAG_KEY: \"false\"\n    API_KEY: \"2\"\n",
		"%CONFIGS%": simTwoConfigs + "\n    env:\n      PLAIN_NAME: {value: " + other + ", secret: true}" +
			"\nrequest:\n  headers: {X-Api-Key: " + header + "}\n  api_key_env: MBENCH_TEST_PLANTED_KEY" +
			"\nmetadata: {proxy: 'http://alice:" + pass + "@proxy.example:3128/'}",
		"%RATES%": "40", "%BLOCKS%": "1",
	})
	t.Cleanup(func() { killMarked(out) })
	env := []string{"MBENCH_TEST_PLANTED_KEY=" + apiKey}

	var outputs []string
	for _, args := range [][]string{{"validate", m}, {"run", m, "--dry-run"}} {
		c := startMbenchEnv(t, dir, env, args...)
		mustFinish(t, c, time.Minute)
		outputs = append(outputs, c.output())
	}
	c := startMbenchEnv(t, dir, env, "run", m, "--out", out) // progress and logs on
	// The secrets must really be in play: all reach the walk engine.
	inEnv := []string{"HF_TOKEN=" + tok, "PLAIN_NAME=" + other, "TOKENIZERS_PARALLELISM=false", "FLAG_KEY=false", "API_KEY=2"}
	seen := map[string]bool{}
	waitChild(c, 2*time.Minute, func() bool {
		for _, p := range pidfileProcs(t, out) {
			env, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/environ")
			for _, kv := range inEnv {
				if bytes.Contains(env, []byte(kv+"\x00")) {
					seen[kv] = true
				}
			}
		}
		return len(seen) == len(inEnv)
	})
	if len(seen) != len(inEnv) {
		t.Errorf("the planted values never reached the engine (seen %v): the test would prove nothing", seen)
	}
	mustFinish(t, c, 2*time.Minute)
	outputs = append(outputs, c.output())
	c = startMbenchEnv(t, dir, env, "export", out)
	mustFinish(t, c, time.Minute)
	outputs = append(outputs, c.output())

	for i, o := range outputs {
		for _, s := range secrets {
			if strings.Contains(o, s) {
				t.Errorf("command output %d contains the secret %q:\n%s", i, s, o)
			}
		}
	}
	n := 0
	err := filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := os.ReadFile(p)
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s contains the secret %q", p, s)
			}
		}
		return err
	})
	if err != nil || n < 20 {
		t.Fatalf("walked %d files under %s: %v", n, out, err)
	}
	// The records keep every setting as it was: the copy of the matrix is
	// the matrix with its secret fields alone redacted.
	cp, err := os.ReadFile(filepath.Join(out, "matrix.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`TOKENIZERS_PARALLELISM: "false"`, `FLAG_KEY: "***"`, `API_KEY: "***"`, `X-Api-Key: "***"`, "port: " + portOf(t, m), "http://alice:***@proxy.example:3128/"} {
		if !strings.Contains(string(cp), want) {
			t.Errorf("the matrix copy lacks %s:\n%s", want, cp)
		}
	}
	assertNoEngines(t, out, 3*time.Second)
}

// portOf is the engine port written in the matrix file at path.
func portOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), "port: ")
	port, _, _ := strings.Cut(rest, "\n")
	return port
}

// The helpers below run mbench as a mbenchChild process and find a sweep's engines
// as ground truth, by pid: through its pidfiles and through the marker every
// engine carries in its environment (MBENCH_MARKER=<sweep id>).

// mbenchChild is mbench running as a mbenchChild process of the test.
type mbenchChild struct {
	cmd            *exec.Cmd
	env            []string // what startMbenchEnv put over the test process's environment
	stdout, stderr lockedBuf
	done           chan struct{}
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *lockedBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *lockedBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startMbench starts `mbench ARGS...` in dir, in the test's process group
// (no Setpgid), so that a signal to its pid reaches mbench alone; its
// engines run in sessions of their own.
func startMbench(t *testing.T, dir string, args ...string) *mbenchChild {
	t.Helper()
	return startMbenchEnv(t, dir, nil, args...)
}

// startMbenchEnv is startMbench with env over the test process's
// environment ("K=V" sets K, a bare "K" removes it): a parallel test gives
// its mbench what a serial one would t.Setenv.
func startMbenchEnv(t *testing.T, dir string, env []string, args ...string) *mbenchChild {
	t.Helper()
	c := &mbenchChild{cmd: exec.Command(os.Args[0], args...), env: env, done: make(chan struct{})}
	c.cmd.Dir = dir
	c.cmd.Env = append(overEnv(os.Environ(), env), "MBENCH_TEST_AS_MBENCH=1", "MBENCH_TEST_MAIN=1")
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(c.kill)
	return c
}

// overEnv is base with over applied: "K=V" sets K, a bare "K" removes it.
func overEnv(base, over []string) []string {
	out := slices.Clone(base)
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		if strings.Contains(kv, "=") {
			out = append(out, kv)
		}
	}
	return out
}

// wait waits up to d for the mbenchChild to exit and returns its exit code (-1:
// still running, or killed by a signal).
func (c *mbenchChild) wait(d time.Duration) int {
	select {
	case <-c.done:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		return -1
	}
}

func (c *mbenchChild) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to mbench (only) and reaps it.
func (c *mbenchChild) kill() {
	if !c.exited() {
		_ = c.cmd.Process.Kill()
	}
	<-c.done
}

func (c *mbenchChild) output() string { return c.stdout.String() + c.stderr.String() }

// mustFinish waits for a mbenchChild that must run to its end with every
// run measured (ranToEnd): where the test has a deadline (go test's
// -timeout), until shortly before it, else for d. The limit is a hang's,
// not the machine's speed; a child still running is killed, not orphaned.
func mustFinish(t *testing.T, c *mbenchChild, d time.Duration) {
	t.Helper()
	if dl, ok := t.Deadline(); ok {
		d = time.Until(dl) - 30*time.Second
	}
	code := c.wait(d)
	if code == -1 {
		c.kill()
		t.Fatalf("mbench %v: still running after %s\n%s", c.cmd.Args[1:], d, c.output())
	}
	if err := ranToEnd(t, childErr(code, c.stderr.String()), outOf(c.cmd.Dir, c.cmd.Args[1:])); err != nil {
		t.Fatalf("mbench %v: exit %d (%v)\n%s", c.cmd.Args[1:], code, err, c.output())
	}
}

// waitChild polls cond every 2 ms until it holds, the mbenchChild exits or d passes.
func waitChild(c *mbenchChild, d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end) && !c.exited(); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// liveProc identifies a process across pid reuse: pid and start time.
type liveProc struct {
	pid   int
	start string
}

// procStatus reads state, process group and start time from /proc/<pid>/stat.
func procStatus(pid int) (state string, pgrp int, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := bytes.LastIndex(b, []byte(") "))
	if err != nil || i < 0 {
		return "", 0, "", false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return "", 0, "", false
	}
	pgrp, _ = strconv.Atoi(f[2])
	return f[0], pgrp, f[19], true
}

// alive: this very process (same start time) still runs; zombies count as
// gone.
func (p liveProc) alive() bool {
	st, _, start, ok := procStatus(p.pid)
	return ok && start == p.start && st != "Z" && st != "X"
}

func liveProcs() []liveProc {
	ents, _ := os.ReadDir("/proc")
	var out []liveProc
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			if st, _, start, ok := procStatus(n); ok && st != "Z" && st != "X" {
				out = append(out, liveProc{n, start})
			}
		}
	}
	return out
}

// pidfileProcs lists the live processes of every group named by a pidfile of
// the sweep in out: the engines mbench started and has not stopped.
func pidfileProcs(t *testing.T, out string) []liveProc {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(out, ".state", "pids", "*.pid"))
	var res []liveProc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fs := strings.Fields(string(b))
		if len(fs) != 2 {
			t.Errorf("pidfile %s: %q: want \"PID START\"", f, b)
			continue
		}
		for _, p := range liveProcs() {
			if _, pg, _, _ := procStatus(p.pid); strconv.Itoa(pg) == fs[0] {
				res = append(res, p)
			}
		}
	}
	return res
}

// sweepProcs lists live processes whose environment carries the marker.
func sweepProcs(marker string) []liveProc {
	var res []liveProc
	want := []byte("\x00MBENCH_MARKER=" + marker + "\x00")
	for _, p := range liveProcs() {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/environ")
		if err == nil && bytes.Contains(append([]byte{0}, env...), want) {
			res = append(res, p)
		}
	}
	return res
}

// assertNoEngines fails if a process of the sweep in out is still alive after
// grace, and kills it so that the test leaves nothing behind.
func assertNoEngines(t *testing.T, out string, grace time.Duration) {
	t.Helper()
	id := readSweepRecord(t, out).SweepID
	deadline := time.Now().Add(grace)
	left := sweepProcs(id)
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		left = sweepProcs(id)
	}
	for _, p := range left {
		t.Errorf("engine process %d of sweep %s still alive", p.pid, id)
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// killMarked is a cleanup: kill whatever engines of the sweep in out remain
// (processes this test started, found by the sweep's marker).
func killMarked(out string) {
	b, _ := os.ReadFile(filepath.Join(out, "sweep.json"))
	i := bytes.Index(b, []byte(`"sweep_id": "`))
	if i < 0 {
		return
	}
	id, _, _ := strings.Cut(string(b[i+len(`"sweep_id": "`):]), `"`)
	for _, p := range sweepProcs(id) {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}
