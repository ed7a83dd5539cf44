package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/orchestrator"
)

// lockHolderPID is the pid written in a results directory's lock file (0
// when there is none yet).
func lockHolderPID(out string) int {
	b, err := os.ReadFile(filepath.Join(out, orchestrator.LockFile))
	if err != nil {
		return 0
	}
	var h orchestrator.LockHolder
	if json.Unmarshal(b, &h) != nil {
		return 0
	}
	return h.PID
}

// TestOneOwnerPerSweepDirectory: while a sweep runs, a second mbench on its
// directory (resume, run, export) is refused at once, naming the holder, and
// changes nothing; after kill -9 of the holder the lock is free, and resume
// finishes the sweep.
func TestOneOwnerPerSweepDirectory(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("sim sweep")
	}
	dir := t.TempDir()
	m, out := filepath.Join(dir, "m.yaml"), filepath.Join(dir, "out")
	writeSimMatrix(t, m, map[string]string{"%RATES%": "20", "%BLOCKS%": "2"})
	t.Cleanup(func() { killMarked(out) })
	c := startMbench(t, dir, "run", m, "--out", out, "--quiet")
	if !waitChild(c, time.Minute, func() bool { return lockHolderPID(out) == c.cmd.Process.Pid }) {
		t.Fatalf("the sweep never took its lock\n%s", c.output())
	}
	journal := filepath.Join(out, "journal.jsonl")
	before, _ := os.ReadFile(journal)
	for _, args := range [][]string{{"resume", out}, {"run", m, "--out", out}, {"export", out}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, _, err := runCLI(t, ctx, args...)
		cancel()
		var le *orchestrator.LockedError
		if !errors.As(err, &le) || exitCode(err) != exitLocked || le.Holder.PID != c.cmd.Process.Pid ||
			!strings.Contains(err.Error(), "pid "+strconv.Itoa(c.cmd.Process.Pid)) {
			t.Errorf("%v while a sweep runs: %v (exit %d); want exit 4 naming pid %d", args, err, exitCode(err), c.cmd.Process.Pid)
		}
	}
	if after, _ := os.ReadFile(journal); !strings.HasPrefix(string(after), string(before)) {
		t.Error("a refused process changed the journal")
	}
	// kill -9 while it holds the lock, after a run: the kernel drops it.
	if !waitChild(c, 2*time.Minute, func() bool { b, _ := os.ReadFile(journal); return len(b) > 0 }) {
		t.Fatalf("no run journaled\n%s", c.output())
	}
	// Read-only commands read the running sweep without waiting for it (that
	// they write nothing is checked on a finished sweep, which stands still).
	for _, args := range [][]string{{"status", out}, {"export", out, "--format", "csv"}} {
		stdout, stderr, err := runCLI(t, context.Background(), args...)
		if err != nil || stdout == "" {
			t.Errorf("%v while a sweep runs: %v\n%s", args, err, stderr)
		}
		if args[0] == "status" && !strings.Contains(stdout, "running: pid "+strconv.Itoa(c.cmd.Process.Pid)) {
			t.Errorf("status of a running sweep:\n%s", stdout)
		}
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.wait(time.Minute)
	r := startMbench(t, dir, "resume", out, "--quiet")
	mustFinish(t, r, 2*time.Minute)
	if j := checkFinished(t, out); len(j) != 4 {
		t.Errorf("%d journal lines after resume, want 4 (2 configs × 1 rate × 2 blocks)", len(j))
	}
}

// TestExportUsesTheRecordedMethod: editing the matrix after the sweep does
// not change its report; a different confidence or baseline is a flag of
// export, and the report says so.
func TestExportUsesTheRecordedMethod(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("sim sweep")
	}
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	m, out := finishedSweep(t, ctx)
	report := func() string {
		b, err := os.ReadFile(filepath.Join(out, "report.md"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	orig := report()
	data, _ := os.ReadFile(m)
	edited := strings.Replace(string(data), "confidence: 0.95", "confidence: 0.5", 1)
	edited = strings.Replace(edited, "baseline: plain", "baseline: walk", 1)
	writeTestFile(t, m, []byte(edited))
	if _, stderr, err := runCLI(t, ctx, "export", out); err != nil {
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	if got := report(); got != orig {
		t.Errorf("an edit of the matrix file changed the report of a finished sweep")
	}
	// Overrides print the report they make and leave the recorded one be;
	// the stopping rule is still said at the level it ran at.
	before := treeState(t, out)
	overridden, stderr, err := runCLI(t, ctx, "export", out, "--confidence", "0.9", "--baseline", "walk")
	if err != nil {
		t.Fatalf("export with overrides: %v\n%s", err, stderr)
	}
	for _, want := range []string{"confidence 0.9, where the sweep recorded 0.95", "baseline walk, where the sweep recorded plain", "90% Student-t CI"} {
		if !strings.Contains(overridden, want) {
			t.Errorf("report with overrides lacks %q", want)
		}
	}
	if strings.Contains(overridden, "projected 90% CI half-width") {
		t.Errorf("the override rewrote the stopping rule as if the sweep had run at 90%%")
	}
	if report() != orig || treeState(t, out) != before {
		t.Errorf("an export with overrides changed the sweep directory")
	}
	if _, _, err := runCLI(t, ctx, "export", out, "--baseline", "nosuch"); exitCode(err) != exitUsage || !strings.Contains(err.Error(), `--baseline "nosuch" is not a config`) {
		t.Errorf("unknown baseline: %v (exit %d), want exit 2", err, exitCode(err))
	}
	before = treeState(t, out)
	stdout, _, err := runCLI(t, ctx, "export", out, "--format", "json")
	if treeState(t, out) != before {
		t.Errorf("export --format json wrote into the sweep directory")
	}
	var js struct {
		Comparisons []map[string]any `json:"comparisons"`
	}
	if err != nil || json.Unmarshal([]byte(stdout), &js) != nil || len(js.Comparisons) == 0 {
		t.Fatalf("export --format json: stdout is not the JSON alone: %v\n%s", err, stdout)
	}
	if _, ok := js.Comparisons[0]["metric"]; !ok {
		t.Errorf("comparison fields are not snake_case: %v", js.Comparisons[0])
	}
}

// TestResumeAfterMoveAndDamage: a results directory moved elsewhere, its
// matrix file gone, resumes from its own copy; a journaled run whose
// directory was deleted, whose summary is corrupt, replaced by {} or by
// another run's summary is redone, and temporary files left by kill -9 are
// removed.
func TestResumeAfterMoveAndDamage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("sim sweep")
	}
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	m, out := finishedSweep(t, ctx)
	moved := filepath.Join(t.TempDir(), "moved")
	if out, err := exec.Command("cp", "-a", out, moved).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if err := os.Remove(m); err != nil {
		t.Fatal(err)
	}
	j := readJSONL(t, filepath.Join(moved, "journal.jsonl"))
	if len(j) != 4 {
		t.Fatalf("%d journal lines, want 4", len(j))
	}
	gone, corrupt := j[0]["dir"].(string), j[1]["dir"].(string)
	if err := os.RemoveAll(filepath.Join(moved, gone)); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(moved, corrupt, "summary_A.json"), []byte(`{"cell": tor`))
	// A summary replaced by {}, and one replaced by another run's: each
	// reads, but is not the journaled run's.
	empty, swapped := j[2]["dir"].(string), j[3]["dir"].(string)
	other, err := os.ReadFile(filepath.Join(moved, empty, "summary_A.json"))
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(moved, empty, "summary_A.json"), []byte(`{}`))
	writeTestFile(t, filepath.Join(moved, swapped, "summary_A.json"), other)
	tmp := filepath.Join(moved, ".tables.csv.tmp-123")
	writeTestFile(t, tmp, []byte("half"))
	stdout, stderr, err := runCLI(t, ctx, "resume", moved)
	if err != nil && exitCode(err) != exitNoResult {
		t.Fatalf("resume of a moved directory: %v\n%s\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stderr, "redoing 4 runs whose files are missing, unreadable or not that run's") ||
		!strings.Contains(stderr, `summary_A.json names cell ""`) {
		t.Errorf("resume did not say it redoes the damaged runs:\n%s", stderr)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Error("resume left a temporary file behind")
	}
	j2 := readJSONL(t, filepath.Join(moved, "journal.jsonl"))
	if len(j2) != 4 {
		t.Fatalf("%d journal lines after resume, want 4", len(j2))
	}
	for _, l := range j2 {
		if _, err := os.Stat(filepath.Join(moved, l["dir"].(string), "summary_A.json")); err != nil && l["status"] != "failed" {
			t.Errorf("run %v: %v", l["dir"], err)
		}
	}
}

// measuredStatuses are the statuses of a run that ran its load and wrote
// its records: ok, or one of the two verdicts graded from timing — the load
// generator's send lag (client_limited) and the engine's queue (saturated)
// — which on the simulated engine the machine's speed decides, not mbench's
// code. A test whose subject is the sweep's plumbing (files, journal,
// resume, hosts) asserts its claims on each such run alike; the verdicts
// are tested from given records (results) and scripted engines.
var measuredStatuses = []string{"ok", "client_limited", "saturated"}

// ranToEnd returns nil where err is the exit of a command that ran to its
// end with every run measured (measuredStatuses): exit 0, or exit 3 (not
// every cell has a result) with the runs' statuses read from out's journal
// (a sweep) or summary_A.json (mbench load). Otherwise it returns err,
// with the statuses that were not measured.
func ranToEnd(t testing.TB, err error, out string) error {
	t.Helper()
	if err == nil || exitCode(err) != exitNoResult || out == "" {
		return err
	}
	var statuses []string
	if _, serr := os.Stat(filepath.Join(out, "journal.jsonl")); serr == nil {
		for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
			st, _ := l["status"].(string)
			statuses = append(statuses, st)
		}
	} else if data, rerr := os.ReadFile(filepath.Join(out, "summary_A.json")); rerr == nil {
		var s struct{ Verdict string }
		if json.Unmarshal(data, &s) == nil {
			statuses = append(statuses, s.Verdict)
		}
	}
	for _, st := range statuses {
		if !slices.Contains(measuredStatuses, st) {
			return fmt.Errorf("%w (a run %s)", err, st)
		}
	}
	if len(statuses) == 0 {
		return err
	}
	return nil
}

// outOf is the results directory a command line names: --out's value, or
// resume's and export's argument, relative to dir.
func outOf(dir string, args []string) string {
	for i, a := range args {
		if i+1 < len(args) && (a == "--out" || (i == 0 && (a == "resume" || a == "export"))) {
			if filepath.IsAbs(args[i+1]) {
				return args[i+1]
			}
			return filepath.Join(dir, args[i+1])
		}
	}
	return ""
}

// runSweepCLI is runCLI for a test whose subject is not the verdicts: a
// command that ran to its end with every run measured (ranToEnd) returns
// no error.
func runSweepCLI(t testing.TB, ctx context.Context, args ...string) (string, string, error) {
	t.Helper()
	stdout, stderr, err := runCLI(t, ctx, args...)
	return stdout, stderr, ranToEnd(t, err, outOf("", args))
}

// finishedSweep runs the small sim sweep (2 configs × 1 rate × 2 blocks) to
// its end and returns its matrix file and results directory.
func finishedSweep(t *testing.T, ctx context.Context) (matrix, out string) {
	t.Helper()
	dir := t.TempDir()
	matrix, out = filepath.Join(dir, "m.yaml"), filepath.Join(dir, "out")
	writeSimMatrix(t, matrix, map[string]string{"%RATES%": "20", "%BLOCKS%": "2"})
	if _, stderr, err := runSweepCLI(t, ctx, "run", matrix, "--out", out, "--quiet"); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr)
	}
	return matrix, out
}

// treeState lists dir's files with their sizes and modification times, the
// lock file left out: two equal states are a directory nothing wrote to.
func treeState(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == orchestrator.LockFile {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
