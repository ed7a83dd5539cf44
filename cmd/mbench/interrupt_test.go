package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFaultInterruptAnyInstant interrupts a sweep with Ctrl-C at many
// instants of an engine's life (0-50 ms after mbench begins a launch, that
// is inside the start script and the readiness polls; during measure; right
// after a run's journal line, while the set may be torn down) and with a
// second Ctrl-C soon after the first (the emergency exit) at launch offsets.
// Every time mbench must exit 130 leaving no process of the sweep (found by
// its MBENCH_MARKER, independently of pidfiles), and the next resume must
// start cleanly; the last resume completes the sweep with no run failed.
func TestFaultInterruptAnyInstant(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault injection sweep")
	}
	dir := t.TempDir()
	m, out := filepath.Join(dir, "m.yaml"), filepath.Join(dir, "out")
	writeSimMatrix(t, m, nil)
	t.Cleanup(func() { killMarked(out) })

	type point struct {
		event string        // "launch", "measure" or "journal"
		after time.Duration // after the event
		twice bool          // a second Ctrl-C as soon as the first is handled
	}
	var plan []point
	for _, ms := range []int{0, 2, 4, 6, 8, 10, 12, 15, 18, 20, 25, 30, 35, 40, 45, 50} {
		plan = append(plan, point{event: "launch", after: time.Duration(ms) * time.Millisecond})
	}
	for _, ms := range []int{0, 5, 10, 20, 40} {
		plan = append(plan, point{event: "launch", after: time.Duration(ms) * time.Millisecond, twice: true})
	}
	plan = append(plan, point{event: "measure"}, point{event: "journal"}, point{event: "launch", after: 80 * time.Millisecond})

	logPath := filepath.Join(out, "mbench.log")
	launches := func() int {
		b, _ := os.ReadFile(logPath)
		return strings.Count(string(b), "start engine-")
	}
	for i, p := range plan {
		args := []string{"resume", out, "--quiet"}
		if i == 0 {
			args = []string{"run", m, "--out", out, "--quiet"}
		}
		name := fmt.Sprintf("interrupt %d (%s +%v, twice=%v)", i+1, p.event, p.after, p.twice)
		l0, j0 := launches(), len(journaledDirs(out))
		c := startMbench(t, dir, args...)
		var hit bool
		switch p.event {
		case "launch":
			hit = waitChild(c, time.Minute, func() bool { return launches() > l0 })
		case "measure":
			waitMeasure(t, c, out, j0)
			hit = true
		case "journal":
			hit = waitChild(c, time.Minute, func() bool { return len(journaledDirs(out)) > j0 })
		}
		if !hit {
			c.kill()
			t.Fatalf("%s: the event never came:\n%s", name, c.output())
		}
		time.Sleep(p.after)
		_ = c.cmd.Process.Signal(os.Interrupt)
		if p.twice {
			waitChild(c, 10*time.Second, func() bool { return strings.Contains(c.stderr.String(), "mbench: interrupted") })
			_ = c.cmd.Process.Signal(os.Interrupt)
		}
		code := c.wait(20 * time.Second)
		if code != 130 {
			c.kill()
			t.Fatalf("%s: exit %d, want 130:\n%s", name, code, c.output())
		}
		if strings.Contains(c.output(), "already in use") {
			t.Errorf("%s: a port was still held by an engine of an earlier interrupt:\n%s", name, c.output())
		}
		// mbench has exited: its engines must be gone already (the grace
		// covers a SIGKILLed process being reaped, not a teardown).
		assertNoEngines(t, out, time.Second)
		readJournalStrict(t, out)
		readSweepRecord(t, out)
	}
	c := startMbench(t, dir, "resume", out, "--quiet")
	mustFinish(t, c, 2*time.Minute)
	checkNoFaultVerdicts(t, checkFinished(t, out), "the interrupts")
	assertNoEngines(t, out, time.Second)
}
