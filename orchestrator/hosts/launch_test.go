package hosts

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/sshdtest"
	"github.com/mbench/mbench/shquote"
)

// markedProcs lists the live processes whose environment carries
// MBENCH_MARKER=marker: ground truth for "no engine left", independent of
// pidfiles and of the code under test.
func markedProcs(marker string) []int {
	want := []byte("\x00MBENCH_MARKER=" + marker + "\x00")
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), want) {
			continue
		}
		if st, _, _, ok := procStat(pid); ok && st != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// assertNoMarked fails if a process with the marker is alive once within
// has passed, and kills it so that the test leaves nothing behind.
func assertNoMarked(t *testing.T, marker string, within time.Duration, what string) {
	t.Helper()
	if eventually(within, func() bool { return len(markedProcs(marker)) == 0 }) {
		return
	}
	left := markedProcs(marker)
	for _, p := range left {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	t.Errorf("%s: engine processes left: %v", what, left)
}

// lingeringSpec is testSpec in a directory that a remote monitor may still
// write to after the test (a cancelled launch over SSH runs on): it is
// removed once nothing writes there any more.
func lingeringSpec(t *testing.T, name, command string) ProcSpec {
	dir, err := os.MkdirTemp("", "mbench-hosts-launch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		eventually(time.Minute, func() bool { return os.RemoveAll(dir) == nil })
	})
	return ProcSpec{Name: name, Command: command, StateDir: dir + "/state",
		LogPath: dir + "/logs/" + name + ".log", Marker: testMarker, Tether: true}
}

// launchOffsets are the instants, after Host.Start is called, at which the
// launch tests interrupt it: every millisecond of the first 50 ms (a launch
// takes 5-30 ms here), so that each step of the start script is hit.
func launchOffsets() []time.Duration {
	var out []time.Duration
	for ms := 0; ms <= 50; ms++ {
		out = append(out, time.Duration(ms)*time.Millisecond)
	}
	return out
}

// TestStartCancelledAtAnyInstant cancels Host.Start at every offset of
// launchOffsets (a first Ctrl-C during a launch). Whether Start fails or
// succeeds, once it has returned and a started process has been stopped no
// process of the launch may be left: before it records itself the engine
// dies with its launcher, after that its pidfile names it.
func TestStartCancelledAtAnyInstant(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			var failed, started int
			var markers []string
			for i, off := range launchOffsets() {
				marker := fmt.Sprintf("mbench-cancel-%s-%d-%d-%d", k.name, os.Getpid(), time.Now().UnixNano(), i)
				markers = append(markers, marker)
				spec := lingeringSpec(t, "eng", "sleep 1000")
				spec.Marker = marker
				ctx, cancel := context.WithCancel(context.Background())
				timer := time.AfterFunc(off, cancel)
				p, err := h.Start(ctx, spec)
				timer.Stop()
				cancel()
				if err == nil {
					started++
					sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
					if err := p.Stop(sctx, time.Second); err != nil {
						t.Errorf("offset %v: Stop: %v", off, err)
					}
					scancel()
				} else {
					failed++
				}
				assertNoMarked(t, marker, 3*time.Second, fmt.Sprintf("Start cancelled after %v (err %v)", off, err))
			}
			// Over SSH a cancelled launch cannot stop the remote monitor at
			// once: it may still start the engine after Start returned, and
			// the tether must then kill it. Check every launch again after
			// the tether's settle and grace.
			for _, m := range markers {
				assertNoMarked(t, m, 12*time.Second, "after every launch settled")
			}
			t.Logf("%d launches cancelled before they were reported, %d completed first", failed, started)
			if failed == 0 {
				t.Errorf("no launch was interrupted: the offsets miss the launch")
			}
		})
	}
}

// TestAbortStartsAtAnyInstant is the second Ctrl-C: AbortStarts, then
// StopLeftovers of the state dir, at every offset of a launch, and no
// process of it may be left. Not parallel: AbortStarts aborts every launch
// of the process.
func TestAbortStartsAtAnyInstant(t *testing.T) {
	h := NewLocal()
	for i, off := range launchOffsets() {
		marker := fmt.Sprintf("mbench-abort-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), i)
		spec := testSpec(t, "eng", "sleep 1000")
		spec.Marker = marker
		done := make(chan error, 1)
		go func() {
			_, err := h.Start(context.Background(), spec) // a started one is stopped by its pidfile, as EmergencyStop does
			done <- err
		}()
		time.Sleep(off)
		AbortStarts()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := StopLeftovers(ctx, h, spec.StateDir, marker, 0); err != nil {
			t.Errorf("offset %v: StopLeftovers: %v", off, err)
		}
		cancel()
		assertNoMarked(t, marker, 3*time.Second, fmt.Sprintf("AbortStarts after %v", off))
		<-done
		starting.Lock()
		starting.aborted = false // let the next launch (and the other tests) start
		starting.Unlock()
	}
}

// TestTetherFromTheFirstInstant drops the SSH connection at every offset of
// a launch (mbench dies, or the link breaks): the tether must kill the
// engine whatever step the launch was at.
func TestTetherFromTheFirstInstant(t *testing.T) {
	t.Parallel()
	s := sshdtest.Start(t)
	var lost int
	for i, off := range launchOffsets() {
		h, err := DialSSH(context.Background(), testConfig(s, nil))
		if err != nil {
			t.Fatal(err)
		}
		marker := fmt.Sprintf("mbench-tether-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), i)
		spec := lingeringSpec(t, "eng", "sleep 1000")
		spec.Marker, spec.TetherGrace = marker, time.Second
		timer := time.AfterFunc(off, func() { h.Close() })
		_, err = h.Start(context.Background(), spec)
		timer.Stop()
		h.Close()
		if err != nil {
			lost++
		}
		assertNoMarked(t, marker, 8*time.Second, fmt.Sprintf("connection closed %v into a launch (Start: %v)", off, err))
	}
	if lost == 0 {
		t.Errorf("the connection never broke during a launch: the offsets miss the launch")
	}
}

// cpuHogs starts n busy shell loops beside the test and kills them at cleanup.
func cpuHogs(t testing.TB, n int) {
	t.Helper()
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
}

// TestStopDeadlineUnderLoad: with two CPU hogs beside it, Stop of an engine
// that ignores SIGTERM honours its context deadline, not the grace it asked
// for, and the group is gone. The claim is the order of events, never a
// duration: the engine saw SIGTERM (its trap wrote so), then died of
// SIGKILL (the only signal that ends it), and nothing of its group is left.
// The grace is a day: a Stop that waited it would run the test into its
// timeout. How long the stop takes on a real process tree is measured by
// BenchmarkStopDeadline (docs/development.md).
func TestStopDeadlineUnderLoad(t *testing.T) {
	cpuHogs(t, 2)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			events := filepath.Join(t.TempDir(), "events")
			q := shquote.Quote(events)
			spec := testSpec(t, "stubborn", `trap 'echo TERM >>`+q+`' TERM; echo ready >`+q+`; sleep 1000 & wait; sleep 1000; sleep 1000`)
			p, err := h.Start(ctxT(t, 20*time.Second), spec)
			if err != nil {
				t.Fatal(err)
			}
			if !eventually(time.Minute, func() bool { b, _ := os.ReadFile(events); return string(b) == "ready\n" }) {
				t.Fatal("the engine never set its trap")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			t0 := time.Now()
			if err := p.Stop(ctx, 24*time.Hour); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			took := time.Since(t0)
			if b, _ := os.ReadFile(events); string(b) != "ready\nTERM\n" {
				t.Errorf("the engine's events %q, want ready then one TERM (then SIGKILL)", b)
			}
			if m := groupMembers(p.Pid()); len(m) != 0 {
				t.Errorf("group %d survived Stop: %v", p.Pid(), m)
			}
			t.Logf("%s: Stop under 2 CPU hogs: %v (deadline 2s, grace 24h)", k.name, took.Round(time.Millisecond))
		})
	}
}

// BenchmarkTeardown measures, with two CPU hogs beside it, the stop of a
// real engine process group, each iteration the same four ways in turn:
// as the shell scan loop did it (mb_kill: a /proc scan in sh each 0.1 s
// tick, the grace counted in ticks; the reference) and as it is done now
// (one scan from Go per tick, polls from 5 ms, the grace a deadline), for an
// engine that obeys SIGTERM (time until seen gone) and one that ignores it
// (time past a 0.3 s grace until killed and seen gone); and Stop of an
// engine that ignores SIGTERM under a 1 s context deadline with a day's
// grace (time until it returns, the group gone: the SIGKILL goes out with
// the deadline's reserve, half of it here, left). Beside them it measures the machine's
// noise: how late a 10 ms sleep wakes. It reports medians in ms and the
// reference's ratio to the Go scan (> 1: the Go scan is faster).
//
//	go test ./orchestrator/hosts -run '^$' -bench Teardown -benchtime 5x
func BenchmarkTeardown(b *testing.B) {
	cpuHogs(b, 2)
	h := NewLocal()
	ctx := ctxT(b, time.Hour)
	type way struct {
		name, cmd   string
		grace, past time.Duration // past: the part of the stop that is the grace itself
		shell       bool
	}
	const stubborn = `trap "" TERM; sleep 1000 & wait; sleep 1000`
	ways := []way{
		{"obeys/shell", "sleep 1000", 10 * time.Second, 0, true},
		{"obeys/go", "sleep 1000", 10 * time.Second, 0, false},
		{"ignores/shell", stubborn, 300 * time.Millisecond, 300 * time.Millisecond, true},
		{"ignores/go", stubborn, 300 * time.Millisecond, 300 * time.Millisecond, false},
	}
	took := map[string][]time.Duration{}
	for b.Loop() {
		for _, w := range ways {
			p, err := h.Start(ctx, testSpec(b, "eng", w.cmd))
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // let the child sleep start
			_, _, start, _ := procStat(p.Pid())
			t0 := time.Now()
			if w.shell {
				script := shLib + fmt.Sprintf("mb_kill %d %s %s %d", p.Pid(), start, shquote.Quote(testMarker), graceTicks(w.grace))
				if _, _, err := h.Run(ctx, script); err != nil {
					b.Fatalf("shell stop: %v", err)
				}
			} else if surv, err := killTargets(ctx, localOps{}, []stopTarget{{pgid: p.Pid()}}, w.grace); err != nil || len(surv) > 0 {
				b.Fatalf("killGroups: %v %v", surv, err)
			}
			took[w.name] = append(took[w.name], time.Since(t0)-w.past)
			if m := groupMembers(p.Pid()); len(m) != 0 {
				b.Fatalf("group survived: %v", m)
			}
			_ = p.Stop(ctx, time.Second)
		}
		p, err := h.Start(ctx, testSpec(b, "stubborn", stubborn))
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		t0 := time.Now()
		err = p.Stop(dctx, 24*time.Hour)
		took["deadline"] = append(took["deadline"], time.Since(t0))
		cancel()
		if err != nil {
			b.Fatalf("Stop: %v", err)
		}
		for range 5 {
			t0 := time.Now()
			time.Sleep(10 * time.Millisecond)
			took["noise"] = append(took["noise"], time.Since(t0)-10*time.Millisecond)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for _, k := range []string{"obeys/shell", "obeys/go", "ignores/shell", "ignores/go"} {
		b.ReportMetric(ms(median(took[k])), k+"-ms")
	}
	b.ReportMetric(float64(median(took["obeys/shell"]))/float64(max(median(took["obeys/go"]), time.Microsecond)), "obeys-shell/go")
	b.ReportMetric(float64(median(took["ignores/shell"]))/float64(max(median(took["ignores/go"]), time.Microsecond)), "ignores-shell/go")
	b.ReportMetric(ms(median(took["deadline"])), "stop-1s-deadline-ms")
	b.ReportMetric(ms(median(took["noise"])), "sleep-late-ms")
	b.ReportMetric(0, "ns/op")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
