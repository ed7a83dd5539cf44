package hosts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/sshdtest"
)

// FindLeftovers lists, for the tests, the pidfiles under stateDir whose process group is still
// alive and ours (see Leftover). It changes nothing.
func FindLeftovers(ctx context.Context, h Host, stateDir, marker string) ([]Leftover, error) {
	if err := checkStateDir(stateDir); err != nil {
		return nil, err
	}
	return leftoverScan(ctx, h, stateDir, marker, false, 0)
}

// TestLeftovers: a process whose Host was abandoned without Stop (a killed
// mbench) is found through its pidfile and stopped by a fresh Host.
func TestLeftovers(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			h1, srv := k.new(t)
			spec := testSpec(t, "orphan", `trap "" TERM; sleep 1000`)
			spec.Tether = false
			p, err := h1.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			h1.Close() // abandoned: no Stop
			h2 := NewLocal()
			if srv != nil {
				h2 = dialTest(t, srv, nil)
			}
			time.Sleep(100 * time.Millisecond)
			if !alive(p.Pid()) {
				t.Fatalf("untethered process %d died with its host", p.Pid())
			}
			ls, err := FindLeftovers(ctx, h2, spec.StateDir, testMarker)
			if err != nil || len(ls) != 1 || ls[0].Pid != p.Pid() || ls[0].Name != "orphan" || len(ls[0].Members) < 1 {
				t.Fatalf("FindLeftovers = %+v, %v; want pid %d", ls, err, p.Pid())
			}
			if ls, err := FindLeftovers(ctx, h2, spec.StateDir, "other-sweep"); err != nil || len(ls) != 0 {
				t.Fatalf("another marker found %+v, %v", ls, err)
			}
			stopped, err := StopLeftovers(ctx, h2, spec.StateDir, testMarker, 200*time.Millisecond)
			if err != nil || len(stopped) != 1 || stopped[0].Pid != p.Pid() {
				t.Fatalf("StopLeftovers = %+v, %v", stopped, err)
			}
			if m := groupMembers(p.Pid()); len(m) != 0 {
				t.Fatalf("leftover group survived: %v", m)
			}
			if _, err := os.Stat(ls[0].PidFile); !os.IsNotExist(err) {
				t.Fatalf("pidfile kept: %v", err)
			}
			if ls, err := FindLeftovers(ctx, h2, spec.StateDir, testMarker); err != nil || len(ls) != 0 {
				t.Fatalf("after stop: %+v, %v", ls, err)
			}
		})
	}
}

// TestPidReuseProtection: pidfiles naming live processes that are not ours
// (no marker, or another start time) are neither reported nor killed.
func TestPidReuseProtection(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 20*time.Second)
	h := NewLocal()
	dir := t.TempDir()
	stranger := exec.Command("sleep", "1000") // no MBENCH_MARKER in its environment
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stranger.Process.Kill(); stranger.Wait() })
	_, _, start, _ := procStat(stranger.Process.Pid)
	write := func(name string, pid int, start string) string {
		p := filepath.Join(dir, name+".pid")
		if err := os.WriteFile(p, []byte(strconv.Itoa(pid)+" "+start+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	strangerFile := write("stranger", stranger.Process.Pid, start)
	// A marked process of ours, but the pidfile's start time is another's.
	spec := testSpec(t, "marked", "sleep 1000")
	p, err := h.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx, time.Second)
	_, _, pstart, _ := procStat(p.Pid())
	reusedFile := write("reused", p.Pid(), pstart+"1")
	write("garbage", 0, "x")

	ls, err := FindLeftovers(ctx, h, dir, testMarker)
	if err != nil || len(ls) != 0 {
		t.Fatalf("FindLeftovers = %+v, %v; want none", ls, err)
	}
	if ls, err := StopLeftovers(ctx, h, dir, testMarker, time.Second); err != nil || len(ls) != 0 {
		t.Fatalf("StopLeftovers = %+v, %v; want none", ls, err)
	}
	time.Sleep(50 * time.Millisecond)
	if !alive(stranger.Process.Pid) || !alive(p.Pid()) {
		t.Fatal("StopLeftovers killed a process that is not a leftover")
	}
	for _, f := range []string{strangerFile, reusedFile} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("pidfile of a live process removed: %v", err)
		}
	}
	// A pidfile whose process is gone is removed.
	gone := write("gone", 999999999, "1")
	if _, err := StopLeftovers(ctx, h, dir, testMarker, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Fatalf("stale pidfile kept: %v", err)
	}
}

// TestNoisyLoginShell: output of a chatty rc file before each command does not
// corrupt Get, Size or Start.
func TestNoisyLoginShell(t *testing.T) {
	t.Parallel()
	s := sshdtest.StartFake(t)
	s.SetLoginNoise("Welcome! conda activated\nstarted 1 2\n")
	h := dialTest(t, s, nil)
	ctx := ctxT(t, 20*time.Second)
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, []byte("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := h.Size(ctx, f); err != nil || n != 7 {
		t.Fatalf("Size = %d, %v", n, err)
	}
	var b []byte
	w := writerFunc(func(p []byte) (int, error) { b = append(b, p...); return len(p), nil })
	if n, err := h.Get(ctx, f, 3, w); err != nil || n != 4 || string(b) != "load" {
		t.Fatalf("Get = %d %q, %v", n, b, err)
	}
	spec := testSpec(t, "noisy", "exit 4")
	p, err := h.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if ee, ok := p.Err().(*ExitError); !ok || ee.Code != 4 {
		t.Fatalf("Err = %v, want exit status 4", p.Err())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
