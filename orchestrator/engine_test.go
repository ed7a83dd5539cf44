package orchestrator

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
)

// TestPortUseSynthetic: which /proc/net/tcp lines hold a port.
func TestPortUseSynthetic(t *testing.T) {
	const header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	line := func(local, st, inode string) string {
		return "   0: " + local + " 0100007F:9C40 " + st + " 00000000:00000000 00:00000000 00000000  1000        0 " + inode + " 1 0000000000000000 20 4 0 10 -1\n"
	}
	cases := []struct {
		name, table, want string
	}{
		{"listener v4", line("0100007F:1F90", "0A", "123"), "a listening socket"},
		{"listener v6", line("00000000000000000000000000000000:1F90", "0A", "123"), "a listening socket"},
		{"outgoing connection", line("0100007F:1F90", "01", "77"), "a connection (ESTABLISHED)"},
		{"two connections", line("0100007F:1F90", "01", "77") + line("0100007F:1F90", "01", "78"), "2 connections (ESTABLISHED)"},
		{"bound, not listening", line("0100007F:1F90", "07", "9"), "a connection (CLOSE)"},
		{"time_wait", line("0100007F:1F90", "06", "0"), ""},
		{"orphan of a dead engine", line("0100007F:1F90", "05", "0"), ""},
		{"other port", line("0100007F:1F91", "0A", "5"), ""},
		{"remote port only", "   0: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 5 1\n", ""},
		{"garbage", "x y z\n:::\n", ""},
	}
	for _, c := range cases {
		if got := portUse(header+c.table, 8080); got != c.want {
			t.Errorf("%s: portUse = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestPortInUseRealSockets checks the local port check against sockets this
// test holds: a listener (IPv4 and IPv6), the local port of an outgoing
// connection, and a port nothing holds.
func TestPortInUseRealSockets(t *testing.T) {
	s := &launcher{m: &matrices.Matrix{}}
	ctx := context.Background()
	h := hosts.NewLocal()
	check := func(what string, port int, want bool, wantUse string) {
		t.Helper()
		busy, use := s.portInUse(ctx, "local", 0, h, "http://127.0.0.1:"+itoa(port), port)
		if busy != want || !strings.Contains(use, wantUse) {
			t.Errorf("%s (port %d): portInUse = %v %q, want %v %q", what, port, busy, use, want, wantUse)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	check("IPv4 listener", ln.Addr().(*net.TCPAddr).Port, true, "a listening socket")

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	check("outgoing connection's local port", c.LocalAddr().(*net.TCPAddr).Port, true, "ESTABLISHED")

	if ln6, err := net.Listen("tcp", "[::1]:0"); err == nil {
		defer ln6.Close()
		check("IPv6 listener", ln6.Addr().(*net.TCPAddr).Port, true, "a listening socket")
	} else {
		t.Logf("no IPv6 loopback: %v", err)
	}

	// A socket bound but neither listening nor connected is in no
	// /proc/net/tcp table; the engine's bind would still fail on it.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	check("bound-only socket", sa.(*syscall.SockaddrInet4).Port, true, "a socket bound to it")

	// A closed listener leaves no socket: the check says free, and a new
	// listener on the port (the ground truth) succeeds.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	check("closed listener", port, false, "")
	again, err := net.Listen("tcp", "127.0.0.1:"+itoa(port))
	if err != nil {
		t.Errorf("port %d was reported free but cannot be listened on: %v", port, err)
	} else {
		again.Close()
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestAwaitFreePort: a launch whose port a just-stopped process still
// holds waits for it to free (here a real listener, closed once the wait
// has seen it busy: the event, not a sleep), and then the port can be
// listened on; a port held past the wait is reported busy with its holder;
// the wait is wall time, so a slow check (a remote host over SSH) is asked
// fewer times, never more: counted sleeps would ask wait/poll + 1 = 6 times.
func TestAwaitFreePort(t *testing.T) {
	s := &launcher{m: &matrices.Matrix{}}
	ctx := context.Background()
	h := hosts.NewLocal()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	url := "http://127.0.0.1:" + itoa(port)
	sawBusy := make(chan struct{})
	var once sync.Once
	go func() { <-sawBusy; ln.Close() }()
	busy, use := awaitFreePort(ctx, time.Minute, 10*time.Millisecond, func() (bool, string) {
		b, u := s.portInUse(ctx, "local", 0, h, url, port)
		if b {
			once.Do(func() { close(sawBusy) })
		}
		return b, u
	})
	if busy {
		t.Fatalf("port %d still reported busy (%s) after its listener closed", port, use)
	}
	again, err := net.Listen("tcp", "127.0.0.1:"+itoa(port))
	if err != nil {
		t.Fatalf("port %d was reported free but cannot be listened on: %v", port, err)
	}
	defer again.Close()

	checks := 0
	start := time.Now()
	busy, use = awaitFreePort(ctx, 500*time.Millisecond, 100*time.Millisecond, func() (bool, string) {
		checks++
		time.Sleep(200 * time.Millisecond) // a slow remote check
		return s.portInUse(ctx, "local", 0, h, url, port)
	})
	if !busy || !strings.Contains(use, "a listening socket") {
		t.Errorf("a port held throughout: busy %v %q, want busy by a listening socket", busy, use)
	}
	if elapsed := time.Since(start); elapsed < 500*time.Millisecond {
		t.Errorf("gave up after %v, before the 500ms wait", elapsed)
	}
	if checks > 3 {
		t.Errorf("%d checks of 200ms in a 500ms wait: the wait counts sleeps, not wall time (at most 3)", checks)
	}

	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	if busy, _ := awaitFreePort(ctx2, time.Minute, time.Second, func() (bool, string) { return true, "held" }); !busy {
		t.Error("a cancelled wait reported the port free")
	}
}
