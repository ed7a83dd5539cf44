//go:build linux

package openloop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The reactor: every request over the raw HTTP/1.1 client runs as a
// coroutine (iter.Pull) driven by one goroutine that waits on an epoll set of
// all the run's connections. Each request's goroutine used to wake through
// Go's scheduler for every flushed token and then read the socket twice: once
// for the token, once more to find it empty. Here a token costs one
// epoll_wait (shared by the tokens that arrive together), one read(2) and a
// coroutine switch, with no trip through the scheduler.
//
// Connections are registered edge-triggered for EPOLLIN|EPOLLOUT|EPOLLRDHUP.
// A read that returns less than asked for has emptied the socket, and any
// byte arriving after it raises a new edge, so the next read waits for one.
// A FIN or RST that arrived with the last data raises no new edge; the event
// that reported the data reported it too (EPOLLRDHUP, EPOLLHUP, EPOLLERR),
// and from then on the connection is read to its end without waiting. (That
// is why this cannot be done with Go's own netpoller, which does not pass
// the event mask on: see docs/loadgen.md's note on the dropped RawConn attempt.)

// reactor owns the epoll set, the connections in it and the coroutines.
type reactor struct {
	epfd, evfd int
	tfd        int // a timerfd: the open loop's send times (see dispatch)

	mu      sync.Mutex
	conns   map[int32]*rconn // by epoll id
	lastID  int32
	inbox   []func()    // requests to start
	wakes   []*rconn    // connections cancelled by another goroutine
	quit    bool        // close was asked for
	newDisp *dispatch   // a dispatch for the loop to take over (see dispatch)
	sleeps  atomic.Bool // the loop is (about to be) in epoll_wait

	clk *clock // the run's clock (for receive times), set before the first dial
	// unstamped counts connections without kernel receive times: with any,
	// the loop does not coalesce its waits (see wait); nor with eachWake
	// (benchmarks: the baseline).
	unstamped atomic.Int32
	eachWake  bool
	// The loop's last two wakes with connection events (clk ns), for wait;
	// woken counts the waits that returned events (benchmarks read it).
	lastWake, prevWake int64
	woken              atomic.Int64

	// Owned by the loop's goroutine and the coroutines it resumes.
	cur  *coro     // the coroutine running now
	idle []*coro   // coroutines that finished their request
	disp *dispatch // the open loop's sends, when the reactor paces them
	done chan struct{}
}

// coro is a coroutine that runs requests, one after another.
type coro struct {
	next  func() (struct{}, bool)
	stop  func()
	yield func(struct{}) bool
	fn    func() // the request it runs; nil once it has finished
}

// Epoll ids of the reactor's own files; connections count from 1.
const (
	doorbellID int32 = 0
	timerID    int32 = -1
)

// errReactorClosed is the error of a read or write whose coroutine was
// stopped because the run's reactor closed.
var errReactorClosed = errors.New("load generator: connection reactor closed")

// newReactor starts a reactor.
func newReactor() (*reactor, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	// The doorbell is edge-triggered too: every write raises an edge, so it
	// is never read (its counter cannot reach its limit in a run).
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: doorbellID}); err != nil {
		unix.Close(evfd)
		unix.Close(epfd)
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err == nil {
		err = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, tfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: timerID})
	}
	if err != nil {
		if tfd >= 0 {
			unix.Close(tfd)
		}
		unix.Close(evfd)
		unix.Close(epfd)
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	stampKeeper()
	re := &reactor{epfd: epfd, evfd: evfd, tfd: tfd, conns: make(map[int32]*rconn), done: make(chan struct{})}
	go re.loop()
	return re, nil
}

// submit runs fn as a coroutine of the reactor. fn may wait only on
// connections dialled by the reactor (and briefly on locks and buffered
// channels): it holds the reactor while it runs.
func (re *reactor) submit(fn func()) {
	re.mu.Lock()
	re.inbox = append(re.inbox, fn)
	re.mu.Unlock()
	re.ring()
}

// ring wakes the loop if it waits in epoll_wait. A loop that is awake runs
// pace again before it waits, so ring also has pace look again.
func (re *reactor) ring() {
	if re.sleeps.CompareAndSwap(true, false) {
		one := [8]byte{1}
		_, _ = unix.Write(re.evfd, one[:])
	}
}

// close stops the loop once the coroutines it runs have finished, and
// releases the epoll set. The connections must have been closed already.
func (re *reactor) close() {
	re.mu.Lock()
	re.quit = true
	re.mu.Unlock()
	re.sleeps.Store(true) // ring even if the loop is awake: it rechecks
	re.ring()
	<-re.done
	unix.Close(re.tfd)
	unix.Close(re.evfd)
	unix.Close(re.epfd)
}

func (re *reactor) loop() {
	defer close(re.done)
	// The thread is the reactor's alone, with a timer slack of 1 ns, so
	// that the timerfd wakes it at the send times asked for (by default the
	// kernel may defer a timer by 50 µs). Never unlocked: the thread ends
	// with the loop.
	runtime.LockOSThread()
	setTimerSlack()
	events := make([]unix.EpollEvent, 256)
	var ready []readyConn
	var inbox []func()
	var wakes []*rconn
	for {
		re.mu.Lock()
		inbox, re.inbox = re.inbox, inbox[:0]
		wakes, re.wakes = re.wakes, wakes[:0]
		quit := re.quit
		if re.newDisp != nil {
			re.disp, re.newDisp = re.newDisp, nil
		}
		if len(inbox) == 0 && len(wakes) == 0 && !quit {
			re.sleeps.Store(true) // set under mu: a submit after the unlock rings
		}
		re.mu.Unlock()
		for i, fn := range inbox {
			re.start(fn)
			inbox[i] = nil
		}
		for i, c := range wakes {
			if w := c.waiter; w != nil {
				re.resume(w)
			}
			wakes[i] = nil
		}
		if quit && len(inbox) == 0 && len(wakes) == 0 {
			for _, co := range re.idle {
				co.stop()
			}
			re.idle = nil
			return
		}
		re.pace()
		if !re.sleeps.Load() {
			continue
		}
		n, err := re.wait(events)
		re.sleeps.Store(false)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			panic(fmt.Sprintf("load generator: epoll_wait: %v", err)) // EBADF/EFAULT/EINVAL: a bug here
		}
		re.pace() // a send that is due goes before the streams' bytes are read
		// The connections the events name, under one lock a batch. The
		// doorbell and the timer (ids ≤ 0) need nothing: the loop's next
		// round looks at the inbox and the dispatch. A connection closed
		// since the wait is gone from conns; one that a coroutine closes
		// later in the batch has no waiter, so its flags are set for nothing.
		ready = ready[:0]
		re.mu.Lock()
		for _, ev := range events[:n] {
			if c := re.conns[ev.Fd]; ev.Fd > 0 && c != nil {
				ready = append(ready, readyConn{c, ev.Events})
			}
		}
		re.mu.Unlock()
		for _, rc := range ready {
			c, ev := rc.c, rc.ev
			if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				c.readable = true
			}
			if ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				c.hup = true
				c.finned.Store(true)
			}
			if ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				c.writable = true
			}
			if w := c.waiter; w != nil {
				re.resume(w)
				re.paceDue()
			}
		}
	}
}

// readTick is the least time between two of the loop's waits while
// connection events come denser than that: one wait then collects the
// tokens of many streams, whose times the kernel keeps (rxstamp_linux.go),
// instead of the thread sleeping and waking for each token.
const readTick = 250 * time.Microsecond

// wait waits for events. While the loop's last two wakes with connection
// events came within two ticks, it first sleeps out the rest of readTick
// from the last one — never past the next send — and then takes what is
// there; it blocks only when that is nothing. Sparse events wake it one by
// one, as before. It coalesces only while it paces an open loop (re.disp),
// whose sends follow the schedule, not completions: a closed loop, a trace's
// sessions or a concurrency cap send when a request ends, and would send up
// to a tick late. Nor while any connection lacks kernel receive times.
func (re *reactor) wait(events []unix.EpollEvent) (int, error) {
	if d := re.disp; d != nil && !re.eachWake && re.unstamped.Load() == 0 && re.lastWake-re.prevWake < 2*int64(readTick) {
		now := re.clk.now()
		until := re.lastWake + int64(readTick)
		if d.armed > 0 {
			until = min(until, d.armed)
		}
		if until-now > int64(20*time.Microsecond) {
			ts := unix.NsecToTimespec(until - now)
			_ = unix.Nanosleep(&ts, nil)
		}
		if n, err := unix.EpollWait(re.epfd, events, 0); n != 0 || err != nil {
			re.noteWake(events[:max(n, 0)])
			return n, err
		}
	}
	n, err := unix.EpollWait(re.epfd, events, -1)
	re.noteWake(events[:max(n, 0)])
	return n, err
}

// wakeCount is how many of the loop's waits returned events.
func (re *reactor) wakeCount() int64 { return re.woken.Load() }

// noteWake keeps the time of a wake that brought connection events.
func (re *reactor) noteWake(evs []unix.EpollEvent) {
	if len(evs) > 0 {
		re.woken.Add(1)
	}
	if re.clk == nil {
		return
	}
	for _, ev := range evs {
		if ev.Fd > 0 {
			re.prevWake, re.lastWake = re.lastWake, re.clk.now()
			return
		}
	}
}

// readyConn is a connection and the events epoll reported on it.
type readyConn struct {
	c  *rconn
	ev uint32
}

// start runs fn on an idle coroutine, or a new one.
func (re *reactor) start(fn func()) {
	var co *coro
	if n := len(re.idle); n > 0 {
		co = re.idle[n-1]
		re.idle = re.idle[:n-1]
	} else {
		co = &coro{}
		co.next, co.stop = iter.Pull(func(yield func(struct{}) bool) {
			co.yield = yield
			for {
				co.fn()
				co.fn = nil
				if !yield(struct{}{}) {
					return
				}
			}
		})
	}
	co.fn = fn
	re.resume(co)
}

// resume runs co until it waits or finishes its request.
func (re *reactor) resume(co *coro) {
	re.cur = co
	co.next()
	re.cur = nil
	if co.fn == nil {
		re.idle = append(re.idle, co)
	}
}

// register adds fd to the epoll set as a new connection.
func (re *reactor) register(fd int, raddr net.Addr) (*rconn, error) {
	re.mu.Lock()
	re.lastID++
	if re.lastID <= 0 {
		re.lastID = 1
	}
	for re.conns[re.lastID] != nil {
		re.lastID++
	}
	c := &rconn{re: re, fd: fd, id: re.lastID, raddr: raddr}
	re.conns[c.id] = c
	re.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: c.id}
	if err := unix.EpollCtl(re.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		re.forget(c)
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	return c, nil
}

func (re *reactor) forget(c *rconn) {
	re.mu.Lock()
	delete(re.conns, c.id)
	re.mu.Unlock()
}

// dialTimeout bounds a connect, as the net.Dialer of the goroutine path.
const dialTimeout = 30 * time.Second

// dial connects to ap from a coroutine of the reactor.
func (re *reactor) dial(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	raddr := net.TCPAddrFromAddrPort(ap)
	opErr := func(op string, err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: raddr, Err: os.NewSyscallError(op, err)}
	}
	family, sa := unix.AF_INET, unix.Sockaddr(&unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()})
	if ap.Addr().Is6() && !ap.Addr().Is4In6() {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, opErr("socket", err)
	}
	// As net.Dialer: no Nagle, keep-alive probes after 30 s idle.
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 30)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 30)
	c, err := re.register(fd, raddr)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if re.clk != nil {
		if c.enableRxStamps(); !c.rx.on {
			re.unstamped.Add(1)
		}
		c.arrivedNow = c.arrived
	}
	err = unix.Connect(fd, sa)
	if errors.Is(err, unix.EINPROGRESS) {
		stop := context.AfterFunc(ctx, c.cancel)
		t := time.AfterFunc(dialTimeout, c.cancel)
		for err == unix.EINPROGRESS {
			if c.canceled.Load() {
				err = os.ErrDeadlineExceeded
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				break
			}
			if c.writable || c.hup {
				var soerr int
				if soerr, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soerr != 0 {
					err = unix.Errno(soerr)
				}
				break
			}
			if werr := c.wait(); werr != nil {
				err = werr
			}
		}
		stop()
		t.Stop()
		if err == nil && c.canceled.Load() { // cancelled just as it connected
			err = ctx.Err()
			if err == nil {
				err = os.ErrDeadlineExceeded
			}
		}
	}
	if err != nil {
		c.Close()
		var errno unix.Errno
		if errors.As(err, &errno) {
			return nil, opErr("connect", errno)
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: raddr, Err: err}
	}
	return c, nil
}

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
