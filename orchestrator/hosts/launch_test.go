package hosts

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
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
		eventually(15*time.Second, func() bool { return os.RemoveAll(dir) == nil })
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
func cpuHogs(t *testing.T, n int) {
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
// that ignores SIGTERM returns within its context deadline (not after the
// grace it asked for), and the group is gone.
func TestStopDeadlineUnderLoad(t *testing.T) {
	cpuHogs(t, 2)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			spec := testSpec(t, "stubborn", `trap "" TERM; sleep 1000 & wait; sleep 1000`)
			p, err := h.Start(ctxT(t, 20*time.Second), spec)
			if err != nil {
				t.Fatal(err)
			}
			const deadline = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			t0 := time.Now()
			err = p.Stop(ctx, 30*time.Second)
			took := time.Since(t0)
			if err != nil {
				t.Fatalf("Stop: %v", err)
			}
			// The slack covers the return after the check, not another tick.
			if took > deadline+250*time.Millisecond {
				t.Errorf("Stop took %v under load, past its %v deadline", took, deadline)
			}
			if m := groupMembers(p.Pid()); len(m) != 0 {
				t.Errorf("group %d survived Stop: %v", p.Pid(), m)
			}
			t.Logf("%s: Stop under 2 CPU hogs: %v (deadline %v, grace 30s)", k.name, took.Round(time.Millisecond), deadline)
		})
	}
}

// TestTeardownSpeedUnderLoad measures, with two CPU hogs beside it, the
// stop of an engine group as the shell scan loop did it (mb_kill: a /proc
// scan in sh each 0.1 s tick, the grace counted in ticks) and as it is done
// now (one scan from Go per tick, polls from 5 ms, the grace a deadline):
// the time until an engine that obeys SIGTERM is seen gone, and how far past
// a 0.3 s grace an engine that ignores SIGTERM is killed and seen gone. It
// logs the medians and their ratio, and fails if the Go path is not faster.
func TestTeardownSpeedUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	cpuHogs(t, 2)
	h := NewLocal()
	ctx := ctxT(t, 2*time.Minute)
	const n = 3
	for _, c := range []struct {
		name, cmd   string
		grace, past time.Duration // past: the part of the stop that is the grace itself
	}{
		{"obeys SIGTERM", "sleep 1000", 10 * time.Second, 0},
		{"ignores SIGTERM", `trap "" TERM; sleep 1000 & wait; sleep 1000`, 300 * time.Millisecond, 300 * time.Millisecond},
	} {
		var shell, gol []time.Duration
		for i := range 2 * n {
			spec := testSpec(t, "eng", c.cmd)
			p, err := h.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // let the child sleep start
			_, _, start, _ := procStat(p.Pid())
			t0 := time.Now()
			if i%2 == 0 {
				script := shLib + fmt.Sprintf("mb_kill %d %s %s %d", p.Pid(), start, shquote.Quote(testMarker), graceTicks(c.grace))
				if _, _, err := h.Run(ctx, script); err != nil {
					t.Fatalf("shell stop: %v", err)
				}
				shell = append(shell, time.Since(t0)-c.past)
			} else {
				if surv, err := killTargets(ctx, localOps{}, []stopTarget{{pgid: p.Pid()}}, c.grace); err != nil || len(surv) > 0 {
					t.Fatalf("killGroups: %v %v", surv, err)
				}
				gol = append(gol, time.Since(t0)-c.past)
			}
			if m := groupMembers(p.Pid()); len(m) != 0 {
				t.Fatalf("group survived: %v", m)
			}
			_ = p.Stop(ctx, time.Second)
		}
		ms, mg := median(shell), median(gol)
		t.Logf("%s, 2 CPU hogs, %d stops each: shell scan loop %v, Go scan %v (median time past the grace until gone); ratio %.1f",
			c.name, n, ms.Round(time.Millisecond), mg.Round(time.Millisecond), float64(ms)/float64(max(mg, time.Microsecond)))
		if mg >= ms {
			t.Errorf("%s: the Go scan (%v) is not faster than the shell loop (%v)", c.name, mg, ms)
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
