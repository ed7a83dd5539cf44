package hosts

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/internal/sshdtest"
	"github.com/mbench/mbench/shquote"
)

// hostKind builds one kind of Host for the table-driven tests.
type hostKind struct {
	name string
	new  func(t *testing.T) (Host, *sshdtest.Server) // server nil for local
}

// kinds: the same behaviour is checked on the local host, over SSH to the
// in-process server and over SSH to a real OpenSSH sshd.
var kinds = []hostKind{
	{"local", func(t *testing.T) (Host, *sshdtest.Server) { return NewLocal(), nil }},
	{"fake-ssh", func(t *testing.T) (Host, *sshdtest.Server) {
		s := sshdtest.StartFake(t)
		return dialTest(t, s, nil), s
	}},
	{"sshd", func(t *testing.T) (Host, *sshdtest.Server) {
		s := sshdtest.Start(t)
		return dialTest(t, s, nil), s
	}},
}

// dialTest connects to s with its key and known_hosts; mod may adjust the config.
func dialTest(t *testing.T, s *sshdtest.Server, mod func(*SSHConfig)) Host {
	t.Helper()
	h, err := DialSSH(context.Background(), testConfig(s, mod))
	if err != nil {
		t.Fatalf("DialSSH: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func testConfig(s *sshdtest.Server, mod func(*SSHConfig)) SSHConfig {
	cfg := SSHConfig{
		Name: "testhost", Address: s.User + "@" + s.Addr, KnownHosts: s.KnownHostsPath,
		Identity: []string{s.ClientKeyPath}, SSHConfigPath: s.SSHConfigPath, KeepAlive: time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

// ctxT is the context of a test's work on its hosts: until go test's deadline
// less hangguard's margin, a hang's bound and never the machine's speed; d
// only where go test sets none (a benchmark, -timeout 0).
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := hangguard.Context(t)
	if _, ok := ctx.Deadline(); !ok {
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), d)
	}
	t.Cleanup(cancel)
	return ctx
}

// procStat returns state, pgrp and start time of pid from /proc, ok=false if gone.
func procStat(pid int) (state string, pgrp int, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, "", false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	pgrp, _ = strconv.Atoi(f[2])
	return f[0], pgrp, f[19], true
}

// alive reports whether pid is a live (non-zombie) process.
func alive(pid int) bool {
	st, _, _, ok := procStat(pid)
	return ok && st != "Z" && st != "X"
}

// groupMembers lists live processes of process group pgid.
func groupMembers(pgid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, pg, _, ok := procStat(pid); ok && pg == pgid && st != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// eventually polls cond until it holds or within has passed, and reports
// whether it held.
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// waitGone waits until no live process of group pgid is left.
func waitGone(t *testing.T, pgid int, within time.Duration) {
	t.Helper()
	if eventually(within, func() bool { return len(groupMembers(pgid)) == 0 }) {
		return
	}
	t.Fatalf("process group %d still alive after %v: %v", pgid, within, groupMembers(pgid))
}

func TestRun(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			ctx := ctxT(t, 20*time.Second)
			weird := `a b 'c' "d" $(echo no) ` + "`x`;\nz"
			out, errb, err := h.Run(ctx, "printf '%s|' "+shquote.Quote(weird)+"; echo err >&2")
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if string(out) != weird+"|" || string(errb) != "err\n" {
				t.Fatalf("stdout %q stderr %q", out, errb)
			}
			_, _, err = h.Run(ctx, "echo boom >&2; exit 3")
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != 3 || string(ee.Stderr) != "boom\n" {
				t.Fatalf("want ExitError{3, boom}, got %#v", err)
			}
		})
	}
}

func TestRunCancelKillsGroup(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			pidf := filepath.Join(t.TempDir(), "pid")
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, _, err := h.Run(ctx, "sleep 300 & echo $! > "+shquote.Quote(pidf)+"; wait")
			// Returned before the command could end by itself: Run did not
			// wait for it (a bound of the command's own, not of the machine).
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) >= 300*time.Second {
				t.Fatalf("Run after cancel: %v after %v", err, time.Since(start))
			}
			b, err := os.ReadFile(pidf)
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if !eventually(time.Minute, func() bool { return !alive(pid) }) {
				t.Fatalf("sleep %d survived the cancelled Run", pid)
			}
		})
	}
}

func TestPutGetSize(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			ctx := ctxT(t, 20*time.Second)
			dst := filepath.Join(t.TempDir(), "new dir", "it's a file.txt")
			data := []byte("0123456789\nsecond line\n")
			if err := h.Put(ctx, bytes.NewReader(data), dst, 0o640); err != nil {
				t.Fatalf("Put: %v", err)
			}
			st, err := os.Stat(dst)
			if err != nil || st.Mode().Perm() != 0o640 {
				t.Fatalf("stat %v mode %v", err, st)
			}
			if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 1 {
				t.Fatalf("temporary files left: %v", ents)
			}
			if n, err := h.Size(ctx, dst); err != nil || n != int64(len(data)) {
				t.Fatalf("Size = %d, %v", n, err)
			}
			for _, off := range []int64{0, 5, int64(len(data)), 100} {
				var buf bytes.Buffer
				n, err := h.Get(ctx, dst, off, &buf)
				want := data[min(off, int64(len(data))):]
				if err != nil || n != int64(len(want)) || !bytes.Equal(buf.Bytes(), want) {
					t.Fatalf("Get(off %d) = %d %q, %v", off, n, buf.Bytes(), err)
				}
			}
			// Overwrite atomically.
			if err := h.Put(ctx, strings.NewReader("v2"), dst, 0o600); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(dst); string(b) != "v2" {
				t.Fatalf("after overwrite: %q", b)
			}
			missing := filepath.Join(t.TempDir(), "missing")
			if n, err := h.Size(ctx, missing); n != -1 || !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Size(missing) = %d, %v", n, err)
			}
			if _, err := h.Get(ctx, missing, 0, &bytes.Buffer{}); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Get(missing): %v", err)
			}
		})
	}
}
