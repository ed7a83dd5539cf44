package hosts

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mbench/mbench/shquote"
)

// escapeCases are engines whose children leave the engine's process group
// and session (setsid, as Ray's raylet does for its workers): one whose
// parent still lives (a descendant by parent pid), one whose parent has
// exited (the child is re-parented to init: only its environment says whose
// it is). Each writes its escaped child's pid to the file named by $1.
var escapeCases = []struct{ name, cmd string }{
	{"child", `setsid sleep 1000 & echo $! > "$0"; wait`},
	{"orphan", `( setsid sleep 1000 & echo $! > "$0" ); sleep 1000`},
	{"orphan-ignores-term", `( trap "" TERM; exec setsid sh -c 'trap "" TERM; while :; do sleep 0.05; done' & echo $! > "$0" ); sleep 1000`},
}

// readChild waits until the engine (group pgid) has written its escaped
// child's pid, the child has left the group and has finished its exec (its
// environment reads back: mid-exec /proc/<pid>/environ reads empty, and a
// leftover scan, which finds an orphan by its environment, would not see
// it yet — an instant no long-lived leftover is in).
func readChild(t *testing.T, file string, pgid int) int {
	t.Helper()
	var pid int
	if !eventually(time.Minute, func() bool {
		b, err := os.ReadFile(file)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		_, pgrp, _, ok := procStat(pid)
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		return err == nil && pid > 0 && alive(pid) && ok && pgrp != pgid && len(env) > 0
	}) {
		t.Fatalf("the engine's escaped child did not start or leave the group %d (%s: %d)", pgid, file, pid)
	}
	return pid
}

// TestStopKillsEscapedDescendants: Stop kills the processes an engine
// started that left its group and session, whether their parent lives or
// not, and whether they obey SIGTERM or not; Stop returns only once they
// are gone. On every host kind.
func TestStopKillsEscapedDescendants(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			for _, c := range escapeCases {
				t.Run(c.name, func(t *testing.T) {
					ctx := ctxT(t, 30*time.Second)
					file := filepath.Join(t.TempDir(), "child")
					spec := testSpec(t, "eng-"+c.name, "sh -c "+shquote.Quote(c.cmd)+" "+shquote.Quote(file))
					p, err := h.Start(ctx, spec)
					if err != nil {
						t.Fatal(err)
					}
					child := readChild(t, file, p.Pid())
					t.Cleanup(func() { _ = killPid(child) })
					if err := p.Stop(ctx, 300*time.Millisecond); err != nil {
						t.Fatalf("Stop: %v", err)
					}
					if alive(child) {
						t.Fatalf("escaped child %d of engine %d survived Stop", child, p.Pid())
					}
				})
			}
		})
	}
}

// TestStopLeftoversKillsEscapedDescendants: an engine left by a crashed
// mbench whose group is gone but whose escaped child lives (holding a GPU,
// say) is found by its pidfile's name and stopped.
func TestStopLeftoversKillsEscapedDescendants(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			ctx := ctxT(t, 30*time.Second)
			file := filepath.Join(t.TempDir(), "child")
			spec := testSpec(t, "eng", "sh -c "+shquote.Quote(`( setsid sleep 1000 & echo $! > "$0" ); exit 0`)+" "+shquote.Quote(file))
			spec.Tether = false
			p, err := h.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			child := readChild(t, file, p.Pid())
			t.Cleanup(func() { _ = killPid(child) })
			<-p.Done() // the engine's whole group is gone; its pidfile stays
			left, err := StopLeftovers(ctx, h, spec.StateDir, spec.Marker, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if alive(child) {
				t.Fatalf("escaped child %d of a dead engine survived StopLeftovers (stopped %+v)", child, left)
			}
			if len(left) != 1 || left[0].Name != "eng" {
				t.Errorf("StopLeftovers = %+v, want the engine named", left)
			}
		})
	}
}

// killPid kills a process a test started, if it still runs.
func killPid(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
