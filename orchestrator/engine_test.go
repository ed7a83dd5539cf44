package orchestrator

import (
	"context"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"

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
