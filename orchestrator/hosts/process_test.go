package hosts

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/shquote"
)

const testMarker = "mbench-test-marker"

func testSpec(t testing.TB, name, command string) ProcSpec {
	dir := t.TempDir()
	return ProcSpec{Name: name, Command: command, StateDir: filepath.Join(dir, "state"),
		LogPath: filepath.Join(dir, "logs", name+".log"), Marker: testMarker, Tether: true}
}

// checkStarted verifies the session leader and the pidfile of a new process.
func checkStarted(t *testing.T, p Process, spec ProcSpec) {
	t.Helper()
	st, pgrp, start, ok := procStat(p.Pid())
	if !ok || st == "Z" || pgrp != p.Pid() {
		t.Fatalf("pid %d: state %q pgrp %d: want a live group leader", p.Pid(), st, pgrp)
	}
	b, err := os.ReadFile(filepath.Join(spec.StateDir, spec.Name+".pid"))
	if err != nil || string(b) != strconv.Itoa(p.Pid())+" "+start+"\n" {
		t.Fatalf("pidfile %q (%v), want %d %s", b, err, p.Pid(), start)
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, cmd string
		grace     time.Duration
		code      int // exit status after Stop
	}{
		{"term", "sleep 1000", 10 * time.Second, 143},
		{"kill", `trap "" TERM; sleep 1000 & wait; sleep 1000`, 300 * time.Millisecond, 137},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					ctx := ctxT(t, 30*time.Second)
					spec := testSpec(t, "eng-"+c.name, c.cmd)
					p, err := h.Start(ctx, spec)
					if err != nil {
						t.Fatalf("Start: %v", err)
					}
					checkStarted(t, p, spec)
					time.Sleep(100 * time.Millisecond) // let the child sleep start
					if n := len(groupMembers(p.Pid())); n < 2 && c.name == "kill" {
						t.Fatalf("want sh and sleep in the group, got %v", groupMembers(p.Pid()))
					}
					t0 := time.Now()
					if err := p.Stop(ctx, c.grace); err != nil {
						t.Fatalf("Stop: %v", err)
					}
					if el := time.Since(t0); c.name == "kill" && el < c.grace {
						t.Fatalf("Stop took %v, before the grace period %v", el, c.grace)
					}
					if m := groupMembers(p.Pid()); len(m) != 0 {
						t.Fatalf("group %d survived Stop: %v", p.Pid(), m)
					}
					select {
					case <-p.Done():
					case <-time.After(time.Minute): // a hang's bound
						t.Fatal("Done not closed after Stop")
					}
					var ee *ExitError
					if !errors.As(p.Err(), &ee) || ee.Code != c.code {
						t.Fatalf("Err = %v, want exit status %d", p.Err(), c.code)
					}
					if _, err := os.Stat(filepath.Join(spec.StateDir, spec.Name+".pid")); !os.IsNotExist(err) {
						t.Fatalf("pidfile not removed: %v", err)
					}
					if err := p.Stop(ctx, time.Second); err != nil {
						t.Fatalf("second Stop: %v", err)
					}
				})
			}
		})
	}
}

func TestStartExitAndLog(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			ctx := ctxT(t, 20*time.Second)
			spec := testSpec(t, "crash", `for i in 1 2 3 4 5; do echo "line $i"; done; echo oops >&2; pwd; exit 7`)
			spec.Dir = t.TempDir()
			p, err := h.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			case <-time.After(time.Minute): // a hang's bound
				t.Fatal("not Done")
			}
			var ee *ExitError
			if !errors.As(p.Err(), &ee) || ee.Code != 7 {
				t.Fatalf("Err = %v, want exit status 7", p.Err())
			}
			want := "line 5\noops\n" + spec.Dir + "\n"
			if got := p.LogTail(ctx, 3); got != want {
				t.Fatalf("LogTail = %q, want %q", got, want)
			}
			if err := p.Stop(ctx, time.Second); err != nil {
				t.Fatalf("Stop after exit: %v", err)
			}
		})
	}
}

func TestStartSecretEnv(t *testing.T) {
	t.Parallel()
	const secret = `s3cr3t-'"$(touch /tmp/pwned)` + "`x`;\nend"
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			ctx := ctxT(t, 20*time.Second)
			out := filepath.Join(t.TempDir(), "env")
			spec := testSpec(t, "secret", `printf %s "$MB_TOKEN" > `+shquote.Quote(out)+`; exec sleep 1000`)
			spec.Env = []Env{{"MB_TOKEN", secret}, {"PLAIN", "x y"}}
			p, err := h.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Stop(ctx, time.Second)
			eventually(time.Minute, func() bool { b, _ := os.ReadFile(out); return len(b) > 0 })
			if b, _ := os.ReadFile(out); string(b) != secret {
				t.Fatalf("engine saw %q, want the secret unchanged", b)
			}
			ps, err := exec.Command("ps", "-eo", "args").Output()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(ps), "s3cr3t") {
				t.Fatalf("secret visible in ps:\n%s", ps)
			}
			// A failing start must not echo env values either.
			bad := spec
			bad.Name, bad.Dir = "secret2", "/nonexistent/dir"
			_, err = h.Start(ctx, bad)
			if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "working directory") {
				t.Fatalf("Start with bad dir: %v", err)
			}
		})
	}
}

// TestStopAfterLeaderExit: Stop after Done kills what the leader left behind.
func TestStopAfterLeaderExit(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			ctx := ctxT(t, 20*time.Second)
			spec := testSpec(t, "parent", "sleep 1000 & exit 3")
			p, err := h.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			<-p.Done()
			if ee, ok := p.Err().(*ExitError); !ok || ee.Code != 3 {
				t.Fatalf("Err = %v", p.Err())
			}
			if err := p.Stop(ctx, time.Second); err != nil {
				t.Fatal(err)
			}
			if m := groupMembers(p.Pid()); len(m) != 0 {
				t.Fatalf("orphans of the leader survived Stop: %v", m)
			}
		})
	}
}

func TestSpecValidation(t *testing.T) {
	t.Parallel()
	good := ProcSpec{Name: "a", Command: "true", StateDir: "/tmp/x", Marker: "m"}
	cases := map[string]func(*ProcSpec){
		"name":     func(s *ProcSpec) { s.Name = "../a" },
		"command":  func(s *ProcSpec) { s.Command = " " },
		"statedir": func(s *ProcSpec) { s.StateDir = "" },
		"marker":   func(s *ProcSpec) { s.Marker = "a b" },
		"envname":  func(s *ProcSpec) { s.Env = []Env{{"A-B", "v"}} },
		"envnul":   func(s *ProcSpec) { s.Env = []Env{{"A", "secretvalue\x00"}} },
		"newline":  func(s *ProcSpec) { s.LogPath = "/tmp/a\nb" },
	}
	for name, mod := range cases {
		s := good
		mod(&s)
		_, err := NewLocal().Start(context.Background(), s)
		if err == nil || strings.Contains(err.Error(), "secretvalue") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}
