//go:build linux

package openloop

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpEstablished is TCP_ESTABLISHED (include/net/tcp_states.h), the state
// of a connection neither side has begun to close.
const tcpEstablished = 1

// peekClosed reports whether the server has closed the idle connection nc,
// without reading from it: a non-blocking MSG_PEEK sees the FIN (0 bytes)
// or a reset; when bytes wait (the end of the previous response, not yet
// read) the kernel's TCP state says whether a FIN came after them.
func peekClosed(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	err = rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR: // open, nothing to read
		case err != nil: // reset
			closed = true
		case n == 0: // FIN
			closed = true
		default:
			info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
			closed = err != nil || info.State != tcpEstablished
		}
	})
	return closed || err != nil
}
