//go:build linux

package openloop

import (
	"context"
	"errors"
	"fmt"
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
		var quit bool
		inbox, wakes, quit = re.takeWork(inbox, wakes)
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
		ready = re.deliver(events[:n], ready)
	}
}

// takeWork hands the loop what other goroutines left for it: the requests
// to start and the connections to wake (swapped with the loop's emptied
// slices), a dispatch to take over, and whether close was asked for. With
// none of these it marks the loop as about to sleep.
func (re *reactor) takeWork(inbox []func(), wakes []*rconn) ([]func(), []*rconn, bool) {
	re.mu.Lock()
	defer re.mu.Unlock()
	inbox, re.inbox = re.inbox, inbox[:0]
	wakes, re.wakes = re.wakes, wakes[:0]
	if re.newDisp != nil {
		re.disp, re.newDisp = re.newDisp, nil
	}
	if len(inbox) == 0 && len(wakes) == 0 && !re.quit {
		re.sleeps.Store(true) // set under mu: a submit after the unlock rings
	}
	return inbox, wakes, re.quit
}

// deliver passes epoll's events to the connections they name, under one
// lock a batch (ready is its scratch), and resumes the coroutine waiting on
// each. The doorbell and the timer (ids ≤ 0) need nothing: the loop's next
// round looks at the inbox and the dispatch. A connection closed since the
// wait is gone from conns; one that a coroutine closes later in the batch
// has no waiter, so its flags are set for nothing.
func (re *reactor) deliver(events []unix.EpollEvent, ready []readyConn) []readyConn {
	ready = ready[:0]
	re.mu.Lock()
	for _, ev := range events {
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
	return ready
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
		if errno, ok := errors.AsType[unix.Errno](err); ok {
			return nil, opErr("connect", errno)
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: raddr, Err: err}
	}
	return c, nil
}
