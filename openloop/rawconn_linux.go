//go:build linux

package openloop

import (
	"net"
	"os"
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

// writeIOV writes a+b from byte off on with one system call.
func writeIOV(fd int, a, b []byte, off int) (int, error) {
	if off < len(a) {
		return unix.Writev(fd, [][]byte{a[off:], b})
	}
	return unix.Write(fd, b[off-len(a):])
}

// stampConn is a connection of the goroutine path whose requests are
// written with writev(2) from inside its RawConn, so that the send is
// stamped right before the system call (see writeRequest) and a write that
// finds the socket full waits in Go's netpoller.
type stampConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

// stampable wraps a dialled TCP connection as a stampConn (others as they
// are).
func stampable(nc net.Conn) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	return &stampConn{TCPConn: tc, rc: rc}
}

func (c *stampConn) writeFrom(a, b []byte, off int, wait bool, now func() int64) (int, int64, error) {
	total := len(a) + len(b)
	var sent int64
	var werr error
	err := c.rc.Write(func(fd uintptr) bool {
		for off < total {
			t := now()
			n, err := writeIOV(int(fd), a, b, off)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				return !wait // false: wait until the socket has room
			case err != nil:
				werr = err
				return true
			}
			if off += n; off == total {
				sent = t
			}
		}
		return true
	})
	if werr != nil {
		return off, 0, &net.OpError{Op: "write", Net: "tcp", Addr: c.RemoteAddr(), Err: os.NewSyscallError("writev", werr)}
	}
	if err != nil {
		return off, 0, &net.OpError{Op: "write", Net: "tcp", Addr: c.RemoteAddr(), Err: err}
	}
	return off, sent, nil
}
