//go:build linux

package openloop

// A connection of the reactor (reactor_linux.go): net.Conn over a
// non-blocking socket whose waits yield the running coroutine.

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// rconn is a connection of the reactor. It implements net.Conn for the raw
// client; its reads and writes wait by yielding their coroutine, so they are
// called only from the reactor's coroutines (the dispatcher's preWrite calls
// writeFrom without waiting).
type rconn struct {
	re    *reactor
	fd    int
	id    int32
	raddr net.Addr

	// Owned by the reactor's goroutine and coroutines: what the events since
	// the last read or write said, and the coroutine waiting on them.
	readable, writable, hup bool
	waiter                  *coro

	canceled atomic.Bool // a deadline passed (SetDeadline in the past)
	closed   atomic.Bool
	// finned: the server closed its side (an event said RDHUP, HUP or ERR,
	// or a read met the end or a reset); set by the reactor, read by the
	// pool (peerClosed), which may be on another goroutine.
	finned atomic.Bool

	rx         rxStamp      // receive times (rxstamp_linux.go)
	arrivedNow func() int64 // c.arrived, bound once
}

// peerClosed reports whether the server has closed c.
func (c *rconn) peerClosed() bool { return c.finned.Load() }

// wait yields the running coroutine until an event or a cancellation on c.
func (c *rconn) wait() error {
	co := c.re.cur
	if co == nil {
		return errors.New("load generator: a reactor connection used outside the reactor")
	}
	c.waiter = co
	ok := co.yield(struct{}{})
	c.waiter = nil
	if !ok {
		return errReactorClosed
	}
	return nil
}

// cancel makes c's waits and future reads and writes fail with a timeout, as
// a passed deadline does on a net.Conn.
func (c *rconn) cancel() {
	if c.canceled.CompareAndSwap(false, true) {
		c.re.mu.Lock()
		c.re.wakes = append(c.re.wakes, c)
		c.re.mu.Unlock()
		c.re.ring()
	}
}

func (c *rconn) opErr(op string, err error) error {
	if errno, ok := err.(unix.Errno); ok {
		err = os.NewSyscallError(op, errno)
	}
	return &net.OpError{Op: op, Net: "tcp", Addr: c.raddr, Err: err}
}

// Read reads what the socket holds, waiting for an event when the last read
// emptied it.
func (c *rconn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if c.canceled.Load() {
			return 0, c.opErr("read", os.ErrDeadlineExceeded)
		}
		if c.readable {
			n, err := c.recv(p)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				c.readable, c.hup = false, false // (hup with nothing to read: not seen, but do not spin)
				continue
			case err != nil:
				c.finned.Store(true)
				return 0, c.opErr("read", err)
			case n == 0:
				c.finned.Store(true)
				return 0, io.EOF
			}
			if n < len(p) && !c.hup {
				c.readable = false
			}
			return n, nil
		}
		if err := c.wait(); err != nil {
			return 0, c.opErr("read", err)
		}
	}
}

// writeFrom writes a+b from byte off on; with wait false it writes what
// the socket takes now and returns. It returns the new offset and, once all
// is written, the clock read just before the last writev (see
// writeRequest).
func (c *rconn) writeFrom(a, b []byte, off int, wait bool, now func() int64) (int, int64, error) {
	total := len(a) + len(b)
	for off < total {
		if c.canceled.Load() {
			return off, 0, c.opErr("write", os.ErrDeadlineExceeded)
		}
		t := now()
		n, err := writeIOV(c.fd, a, b, off)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN: // (writable is left alone: only dial reads it, and a
			// dispatcher that is not the reactor's may be the one writing)
			if !wait {
				return off, 0, nil
			}
			if werr := c.wait(); werr != nil {
				return off, 0, c.opErr("write", werr)
			}
			continue
		case err != nil:
			return off, 0, c.opErr("write", err)
		}
		if off += n; off == total {
			return off, t, nil
		}
	}
	return off, 0, nil
}

// Write writes p, waiting for room as needed.
func (c *rconn) Write(p []byte) (int, error) {
	n, _, err := c.writeFrom(nil, p, 0, true, func() int64 { return 0 })
	return n, err
}

// Close removes c from the epoll set and closes it; safe from any goroutine
// once no coroutine is reading or writing c.
func (c *rconn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.re.forget(c)
	return unix.Close(c.fd) // closing the only descriptor removes it from the set
}

// errFutureDeadline: the raw client sets deadlines only to cancel (a time
// in the past); request timeouts are contexts.
var errFutureDeadline = errors.New("load generator: a reactor connection takes no future deadline")

// SetDeadline: a time in the past cancels c's reads and writes (what the
// raw client does to cancel a request); the zero time clears that.
func (c *rconn) SetDeadline(t time.Time) error {
	switch {
	case t.IsZero():
		c.canceled.Store(false)
	case time.Until(t) <= 0:
		c.cancel()
	default:
		return errFutureDeadline
	}
	return nil
}

// SetReadDeadline is SetDeadline: the client has one deadline per request.
func (c *rconn) SetReadDeadline(t time.Time) error { return c.SetDeadline(t) }

// SetWriteDeadline is SetDeadline.
func (c *rconn) SetWriteDeadline(t time.Time) error { return c.SetDeadline(t) }

// LocalAddr is not tracked.
func (c *rconn) LocalAddr() net.Addr { return nil }

// RemoteAddr is the address dialled.
func (c *rconn) RemoteAddr() net.Addr { return c.raddr }
