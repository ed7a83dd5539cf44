package main

import (
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/durable"
)

// TestFaultKill9Resume kills mbench with SIGKILL at 12 seeded random points
// of a 2 configs × 2 rates × 2 blocks sweep (launch, leftover cleanup,
// warmup, measure, drain, right after a journal line, during export), resumes
// after each kill, and checks the ground truth on disk and by pid: each
// (cell, block) journaled exactly once, every file parses, interrupted run
// directories kept as b<k>.partial-<n> byte for byte, and the engines
// orphaned by each kill stopped by the next resume before it launches.
// MBENCH_FAULT_SEED=n replays another schedule.
func TestFaultKill9Resume(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault injection: runs a sweep under repeated kill -9")
	}
	seed := uint64(20260526)
	if v := os.Getenv("MBENCH_FAULT_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	m, out := filepath.Join(dir, "m.yaml"), filepath.Join(dir, "out")
	writeSimMatrix(t, m, nil)
	t.Cleanup(func() { killMarked(out) })
	const planned, nKills = 8, 12

	type snapshot struct {
		kill  int
		ino   uint64
		files map[string]int64
	}
	partials := map[string][]snapshot{} // run dir → its interrupted attempts, in order
	var orphans []liveProc              // engines left by kills, not yet checked dead
	phases := map[string]int{}
	deadline := time.Now().Add(4 * time.Minute)
	kills := 0
	for kills < nKills {
		if time.Now().After(deadline) {
			t.Fatalf("after %d kills the sweep is still not through its schedule", kills)
		}
		args := []string{"resume", out, "--quiet"}
		if kills == 0 {
			args = []string{"run", m, "--out", out, "--quiet"}
		}
		before := len(readJournalStrict(t, out))
		size0 := sizeOf(filepath.Join(out, "journal.jsonl"))
		remaining := planned - before
		kind := "random"
		switch {
		case kills == nKills-1:
			kind = "export"
		case remaining <= 1:
			kind = "short"
		case remaining == 2 || kills%3 == 2:
			kind = "journal"
		}
		c := startMbench(t, dir, args...)
		switch kind {
		case "random": // never long enough to finish the sweep (a run takes ~1 s)
			time.Sleep(time.Duration(200+rng.IntN(min(2800, 600*(remaining-1)))) * time.Millisecond)
		case "short":
			time.Sleep(time.Duration(150+rng.IntN(450)) * time.Millisecond)
		case "journal":
			waitChild(c, 60*time.Second, func() bool { return sizeOf(filepath.Join(out, "journal.jsonl")) > size0 })
		case "export":
			waitChild(c, 90*time.Second, func() bool {
				// export has begun: the stop is recorded and cells/ exists
				b, _ := os.ReadFile(filepath.Join(out, "sweep.json"))
				_, err := os.Stat(filepath.Join(out, "cells"))
				return err == nil && strings.Contains(string(b), `"stop": {`)
			})
		}
		if c.exited() {
			if kind != "export" {
				t.Fatalf("the sweep ended before kill %d of %d; output:\n%s", kills+1, nKills, c.output())
			}
			t.Logf("kill %d (export): mbench had already finished", kills+1)
			break
		}
		c.kill()
		kills++

		// Ground truth right after the kill.
		j := readJournalStrict(t, out)
		done := map[string]bool{}
		for _, l := range j {
			done[l.Dir] = true
			// A client_limited attempt run again in place (b<k>-try<n>)
			// is finished and kept where it is, named by the last one.
			for _, a := range l.Superseded {
				done[a.Dir] = true
			}
		}
		launched := len(j) > before
		now := pidfileProcs(t, out)
		known := map[liveProc]bool{}
		for _, p := range orphans {
			known[p] = true
		}
		for _, p := range now {
			if !known[p] {
				launched = true
			}
		}
		if launched { // this resume got past its leftover cleanup: earlier orphans must be gone
			for _, p := range orphans {
				if p.alive() {
					t.Errorf("kill %d: engine pid %d orphaned by an earlier kill survived a resume that launched engines", kills, p.pid)
				}
			}
			orphans = nil
		}
		orphans = append(orphans, now...)
		phase := "between runs"
		runDirs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "b[0-9]"))
		for _, rd := range runDirs {
			rel, _ := filepath.Rel(out, rd)
			if done[rel] {
				continue
			}
			files, ino := runDirFiles(rd), dirInode(rd)
			if n := len(partials[rel]); n > 0 && partials[rel][n-1].ino == ino {
				partials[rel] = partials[rel][:n-1] // the same attempt, not reached since
			}
			partials[rel] = append(partials[rel], snapshot{kills, ino, files})
			phase = runPhase(rd, files)
		}
		phases[phase]++
		t.Logf("kill %d (%s) after %d journaled runs: %s; %d orphaned engine processes", kills, kind, len(j), phase, len(now))
	}
	if kills < 10 {
		t.Fatalf("only %d kills", kills)
	}

	c := startMbench(t, dir, "resume", out, "--quiet")
	mustFinish(t, c, 2*time.Minute)
	for _, p := range orphans {
		if p.alive() {
			t.Errorf("engine pid %d orphaned by the last kill survived the final resume", p.pid)
		}
	}
	checkNoFaultVerdicts(t, checkFinished(t, out), "the kills")
	for rel, snaps := range partials {
		for i, s := range snaps {
			p := filepath.Join(out, rel+".partial-"+strconv.Itoa(i+1))
			got := runDirFiles(p)
			if !maps.Equal(got, s.files) || dirInode(p) != s.ino {
				t.Errorf("%s: the attempt interrupted by kill %d should be kept as %s with %v, found %v", rel, s.kill, p, s.files, got)
			}
		}
		if _, err := os.Stat(filepath.Join(out, rel+".partial-"+strconv.Itoa(len(snaps)+1))); err == nil {
			t.Errorf("%s: more partial directories than interrupted attempts", rel)
		}
	}
	assertNoEngines(t, out, 3*time.Second)
	t.Logf("seed %d: %d kills; phases hit: %v", seed, kills, phases)
}

// checkNoFaultVerdicts fails on a run whose verdict a fault can cause
// (failed, errors, incomplete). The verdicts that say how the machine
// measured (saturated, client_limited: a busy CPU slows the simulated
// engine and the load generator) are logged, not failed: the fault tests
// must hold on a loaded machine, and their subject is the faults.
func checkNoFaultVerdicts(t *testing.T, runs []journalRec, cause string) {
	t.Helper()
	for _, l := range runs {
		if !measuredVerdict(t, l) {
			t.Errorf("run %s: %s (%s): no run should fail because of %s", l.Dir, l.Status, l.Reason, cause)
		}
	}
}

// measuredVerdict reports whether a run measured (measuredStatuses)
// rather than failed.
func measuredVerdict(t *testing.T, l journalRec) bool {
	t.Helper()
	return slices.Contains(measuredStatuses, l.Status)
}

// runPhase names the phase an interrupted run directory was in.
func runPhase(dir string, files map[string]int64) string {
	switch {
	case files["summary_A.json"] > 0:
		return "run complete, before its journal line"
	case files["requests.jsonl"] == 0:
		return "launch/ready"
	}
	b, _ := os.ReadFile(filepath.Join(dir, "requests.jsonl"))
	if strings.Contains(string(b), `"phase":"measure"`) {
		return "measure/drain"
	}
	return "warmup"
}

// runDirFiles lists a run directory's files and sizes; the temporary files
// of atomic writes a kill interrupted are left out (resume removes them:
// durable.IsTemp, orchestrator cleanTemps).
func runDirFiles(dir string) map[string]int64 {
	out := map[string]int64{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if durable.IsTemp(e.Name()) {
			continue
		}
		if fi, err := e.Info(); err == nil {
			out[e.Name()] = fi.Size()
		}
	}
	return out
}

func sizeOf(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// dirInode identifies a directory across renames.
func dirInode(p string) uint64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestFaultEngineCrash: one config's engine exits mid-run (sim
// crash_after_steps). Each of its runs is journaled failed with the log tail,
// a fresh engine is started for the next run, the other config's runs go on;
// after FailLimit = 3 consecutive failures the cell is skipped, and
// report.md lists it.
func TestFaultEngineCrash(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault injection sweep")
	}
	dir := t.TempDir()
	m, out := filepath.Join(dir, "m.yaml"), filepath.Join(dir, "out")
	// 20 steps: after the first request or two (~9 steps each alone), and
	// well before the run's end however a busy machine batches its 23
	// requests (60 could outlast a run whose requests a slow machine
	// batched into fewer steps: the crashy cell then had a usable run).
	writeSimMatrix(t, m, map[string]string{"%CONFIGS%": "  plain: {}\n  crashy:\n    sim: {crash_after_steps: 20}", "%RATES%": "40", "%BLOCKS%": "4"})
	t.Cleanup(func() { killMarked(out) })
	c := startMbench(t, dir, "run", m, "--out", out, "--quiet")
	// The crashy cell has no usable run: the sweep finishes, names it, exits 3.
	if code := c.wait(2 * time.Minute); code != exitNoResult {
		c.kill()
		t.Fatalf("exit %d, want 3 (a cell without a usable run)\n%s", code, c.output())
	}
	if !strings.Contains(c.stderr.String(), "(crashy rate=40 64x8): 4 failed") || !strings.Contains(c.stderr.String(), "sweep done: 8 runs: ") {
		t.Errorf("stderr does not name the crashy cell's 4 failed runs:\n%s", c.output())
	}
	j := checkFinished(t, out)
	cfg := map[string]string{}
	for _, cl := range readSweepRecord(t, out).Cells {
		cfg[cl.ID] = cl.Config
	}
	pidRe := regexp.MustCompile(`\(pid (\d+),`)
	pids := map[string]int{}
	for _, l := range j {
		if cfg[l.Cell] == "plain" {
			if !measuredVerdict(t, l) {
				t.Errorf("plain b%d: %s (%s): the sweep should go on past the crashes", l.Block, l.Status, l.Reason)
			}
			continue
		}
		switch {
		case l.Status != "failed":
			t.Errorf("crashy b%d: status %s, want failed", l.Block, l.Status)
		case l.Block <= 3:
			for _, want := range []string{"exited during the run", "exit status 3", "sim: injected crash after 20 steps"} {
				if !strings.Contains(l.Reason, want) {
					t.Errorf("crashy b%d: reason lacks %q (the log tail):\n%s", l.Block, want, l.Reason)
				}
			}
			if m := pidRe.FindStringSubmatch(l.Reason); m != nil {
				pids[m[1]] = l.Block
			}
			var ok, failed int
			for _, r := range readJSONLStrict(t, filepath.Join(out, l.Dir, "requests.jsonl")) {
				if r["status"] == "ok" {
					ok++
				} else {
					failed++
				}
			}
			if ok == 0 || failed == 0 {
				t.Errorf("crashy b%d: %d ok and %d failed requests: want a crash mid-run", l.Block, ok, failed)
			}
		case !strings.HasPrefix(l.Reason, "skipped: the cell failed 3 consecutive runs") || !strings.Contains(l.Reason, "injected crash"):
			t.Errorf("crashy b%d: reason %q: want skipped after 3 consecutive failures, with the cause", l.Block, l.Reason)
		}
	}
	if len(pids) != 3 {
		t.Errorf("the 3 failed runs ran on engine pids %v: want a fresh engine for each", pids)
	}
	rep, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(rep), "crashy") || !strings.Contains(string(rep), "skipped: the cell failed 3 consecutive runs") {
		t.Errorf("report.md does not list the failed cell crashy and why it was skipped")
	}
	assertNoEngines(t, out, 3*time.Second)
}

// TestFaultSIGINT: Ctrl-C during measure stops the load, tears down every
// engine and exits (130) within 10 s with the exact resume command; the run
// in flight leaves no journal line; SIGHUP (a closed terminal) acts the
// same. A second Ctrl-C right after the first
// exits at once and still kills the engines. The engine here is slow to die
// (its shell traps SIGTERM and lingers 30 s) and asks for a 15 s grace, so
// the teardown after one Ctrl-C must cut the grace short to meet 10 s, and
// only the emergency path can kill the engine at once.
func TestFaultSIGINT(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault injection sweep")
	}
	dir := t.TempDir()
	m, out := filepath.Join(dir, "m.yaml"), filepath.Join(dir, "out")
	writeSimMatrix(t, m, map[string]string{"%CONFIGS%": "  plain: {}", "grace: 2s": "grace: 15s",
		"%ENV%": "  command: trap 'sleep 30' TERM; {{.Self}} sim --addr {{.Bind}}:{{.Port}} --step-log {{.StepLog}} --model {{.Model}} {{.ConfigArgs}}\n"})
	t.Cleanup(func() { killMarked(out) })
	// A closed terminal (SIGHUP) is handled like one Ctrl-C.
	for i, sig := range []string{"int", "int-twice", "hup"} {
		twice := sig == "int-twice"
		first := os.Signal(os.Interrupt)
		if sig == "hup" {
			first = syscall.SIGHUP
		}
		args := []string{"run", m, "--out", out, "--quiet"}
		if i > 0 {
			args = []string{"resume", out, "--quiet"}
		}
		c := startMbench(t, dir, args...)
		inflight := waitMeasure(t, c, out, i+1)
		engines := pidfileProcs(t, out)
		if len(engines) == 0 {
			t.Fatalf("no engine process found by pidfile during measure")
		}
		start := time.Now()
		_ = c.cmd.Process.Signal(first)
		// A hang guard, not a speed: which path mbench took is what its
		// output says (checked below), and that it left no engine.
		limit := time.Minute
		if twice { // as soon as the first is being handled
			waitChild(c, time.Minute, func() bool { return strings.Contains(c.stderr.String(), "mbench: interrupted") })
			start = time.Now()
			_ = c.cmd.Process.Signal(os.Interrupt)
		}
		code := c.wait(limit)
		took := time.Since(start)
		if code != 130 {
			c.kill()
			t.Fatalf("interrupt (%s): exit %d after %s, want 130 within %s\n%s", sig, code, took, limit, c.output())
		}
		t.Logf("interrupt (%s): exited %s after the last signal", sig, took.Round(time.Millisecond))
		want := "continue with: mbench resume " + out
		if twice {
			want = "second interrupt: killing engines"
		}
		if !strings.Contains(c.output(), want) {
			t.Errorf("output lacks %q:\n%s", want, c.output())
		}
		assertNoEngines(t, out, 500*time.Millisecond) // by marker: the engine, its shell and the shell's sleep
		for _, p := range engines {
			if p.alive() {
				t.Errorf("interrupt (%s): engine pid %d still alive after mbench exited", sig, p.pid)
			}
		}
		for _, l := range readJournalStrict(t, out) {
			if l.Dir == inflight {
				t.Errorf("the interrupted run %s has a journal line", inflight)
			}
			if _, err := os.Stat(filepath.Join(out, l.Dir, "summary_A.json")); err != nil {
				t.Errorf("journaled run %s is incomplete: %v", l.Dir, err)
			}
		}
	}
}

// waitMeasure waits until at least n runs are journaled and another run is
// in its measure phase, and returns that run's directory (relative to out).
func waitMeasure(t *testing.T, c *mbenchChild, out string, n int) string {
	t.Helper()
	var inflight string
	ok := waitChild(c, time.Minute, func() bool {
		j := journaledDirs(out)
		if len(j) < n {
			return false
		}
		reqs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "b[0-9]", "requests.jsonl"))
		for _, r := range reqs {
			rel, _ := filepath.Rel(out, filepath.Dir(r))
			b, _ := os.ReadFile(r)
			if !j[rel] && strings.Contains(string(b), `"phase":"measure"`) {
				inflight = rel
				return true
			}
		}
		return false
	})
	if !ok {
		c.kill()
		t.Fatalf("no run reached measure:\n%s", c.output())
	}
	return inflight
}

// TestFaultDiskFull runs a sweep whose results directory is on a small tmpfs
// that fills up. mbench must stop with a clear error naming the full disk;
// the journal and the summaries already written stay intact and parse; no
// engine is left; after space is freed, resume completes the sweep.
func TestFaultDiskFull(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault injection sweep")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("disk-full test skipped: cannot mount a 4 MiB tmpfs (needs root and mount permission): %v: %s", err, b)
	}
	m, out := filepath.Join(dir, "m.yaml"), filepath.Join(mnt, "out")
	t.Cleanup(func() {
		killMarked(out)
		for i := 0; i < 20; i++ {
			if exec.Command("umount", mnt).Run() == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = exec.Command("umount", "-l", mnt).Run()
	})
	writeSimMatrix(t, m, nil)
	c := startMbench(t, dir, "run", m, "--out", out, "--quiet")
	// Once the first run is journaled, fill the disk but for 64 KiB: the
	// sweep's next writes fail. (A filler written before the sweep left
	// room for "a few runs", which a busy machine's re-runs in place of
	// client_limited attempts used up before the first journal line.)
	if !waitChild(c, time.Minute, func() bool { return sizeOf(filepath.Join(out, "journal.jsonl")) > 0 }) {
		c.kill()
		t.Fatalf("no run was journaled within a minute (or mbench exited):\n%s", c.output())
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &fs); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	if free := int64(fs.Bavail)*fs.Bsize - 64<<10; free > 0 {
		if err := os.WriteFile(filler, make([]byte, free), 0o644); err != nil && !errors.Is(err, syscall.ENOSPC) {
			t.Fatal(err)
		}
	}
	code := c.wait(2 * time.Minute)
	if code <= 0 {
		c.kill()
		t.Fatalf("exit %d on a full disk, want an error exit:\n%s", code, c.output())
	}
	msg := c.stderr.String()
	if !strings.Contains(msg, "no space left on device") || !strings.Contains(msg, "is full") {
		t.Errorf("the error does not say the disk is full:\n%s", msg)
	}
	t.Logf("mbench on a full disk: %s", strings.TrimSpace(msg))
	j := readJournalStrict(t, out)
	readSweepRecord(t, out)
	for _, l := range j {
		checkRunDir(t, filepath.Join(out, l.Dir))
	}
	if len(j) == 0 {
		t.Errorf("no run was journaled before the disk filled up: the test proves less than it should (filler too large?)")
	}
	assertNoEngines(t, out, 3*time.Second)

	if err := os.Remove(filler); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	c = startMbench(t, dir, "resume", out, "--quiet")
	mustFinish(t, c, 2*time.Minute)
	after := checkFinished(t, out)
	for i, l := range j {
		if !reflect.DeepEqual(after[i], l) {
			t.Errorf("journal line %d changed across the resume: %+v → %+v", i+1, l, after[i])
		}
	}
	assertNoEngines(t, out, 3*time.Second)
}
