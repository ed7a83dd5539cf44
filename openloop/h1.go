package openloop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// The raw HTTP/1.1 client. net/http spends, per streamed request, two
// goroutines per connection (read and write loops) handing the request and
// every body read across channels, a header map per request and response,
// and a context watcher; with tokens flushed one by one that was about half
// of the client's CPU (see BenchmarkStreamedRequestCPU). This client writes
// each prepared request with one writev on a pooled keep-alive connection
// and reads the response on the request's own goroutine. It speaks only what
// a completion stream needs: plain http, a POST with Content-Length, and
// responses with chunked, Content-Length or close-delimited bodies. https
// targets, and a Config.Client, go through net/http instead.

// h1IdleMax is how long a connection may sit idle and still be reused:
// below uvicorn's default keep-alive timeout (5 s), after which vLLM's
// server closes it.
const h1IdleMax = 4 * time.Second

// h1DrainMax bounds what is read of a previous response's leftovers (after
// [DONE]) before a connection is reused.
const h1DrainMax = 64 << 10

// h1Pool holds the keep-alive connections to one target.
type h1Pool struct {
	addr   string // host:port
	prefix []byte // request line and Host header
	dialer net.Dialer
	re     *reactor       // when set, connections are the reactor's (useReactor)
	ap     netip.AddrPort // addr resolved, for the reactor

	mu     sync.Mutex
	idle   []*h1Conn
	closed bool
}

// h1Conn is one connection. pending is set when body, the previous
// response's, was not read to its end: the chunked terminator after [DONE]
// usually arrives in a segment of its own, and the next request on the
// connection reads it instead of this one waiting for it.
type h1Conn struct {
	nc      net.Conn
	br      *bufio.Reader
	idleAt  time.Time
	idleMax time.Duration // how long it may idle: h1IdleMax, or less when the server's Keep-Alive says so
	pending bool
	body    h1Body
}

func newH1Pool(addr, host, path string) *h1Pool {
	return &h1Pool{addr: addr, prefix: []byte("POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\n"),
		dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}}
}

// get returns an idle connection (reused true) or dials a new one.
func (p *h1Pool) get(ctx context.Context) (c *h1Conn, reused bool, err error) {
	if c = p.idleConn(); c != nil {
		return c, true, nil
	}
	c, err = p.dial(ctx)
	return c, false, err
}

// idleConn returns an idle connection, or nil. Connections that idled past
// their time, or that the server has closed (see peerClosed), are closed
// instead: llama.cpp's server, for one, closes the connection after every
// streamed response although its headers offer Keep-Alive.
func (p *h1Pool) idleConn() *h1Conn {
	now := time.Now()
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if now.Sub(c.idleAt) < c.idleMax && !peerClosed(c.nc) {
			return c
		}
		_ = c.nc.Close()
	}
}

func (p *h1Pool) dial(ctx context.Context) (*h1Conn, error) {
	var nc net.Conn
	var err error
	if p.re != nil {
		nc, err = p.re.dial(ctx, p.ap)
	} else {
		nc, err = p.dialer.DialContext(ctx, "tcp", p.addr)
		if err == nil {
			nc = stampable(nc)
		}
	}
	if err != nil {
		return nil, err
	}
	return &h1Conn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10)}, nil
}

// put returns c to the pool (or closes it once the pool is closed, or when
// its reactor already saw the server close it).
func (p *h1Pool) put(c *h1Conn) {
	if pc, ok := c.nc.(peerCloser); ok && pc.peerClosed() {
		_ = c.nc.Close()
		return
	}
	c.idleAt = time.Now()
	p.mu.Lock()
	if !p.closed {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		_ = c.nc.Close()
	}
}

// close closes the idle connections; connections still in use are closed
// when they are put back.
func (p *h1Pool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		_ = c.nc.Close()
	}
}

// h1Exchange is one request on a connection.
type h1Exchange struct {
	pool   *h1Pool
	conn   *h1Conn
	status int
	keep   bool  // the connection may be reused after the body
	resent bool  // the request went again on a new connection (see roundTrip)
	sentNs int64 // when the request's last byte went to the kernel (0: not written here)
	stop   func() bool
}

// errNoResponse marks an exchange in which the server closed the connection
// (FIN or reset) before a single byte of the response: on a reused
// connection, the request is sent again on a new one.
var errNoResponse = errors.New("connection closed before the response")

// noResponse wraps err in errNoResponse when it says the server closed the
// connection; any other failure (a timeout, a cancellation) stays as it is.
func noResponse(err error) error {
	if peerClosedErr(err) {
		return fmt.Errorf("%w: %w", errNoResponse, err)
	}
	return err
}

// peerClosedErr reports whether err is the server closing the connection:
// end of file, a reset, or a write to a connection it had closed.
func peerClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}

// roundTrip writes the prepared request j.wire (headers after Host, blank
// line, body) and reads the response head; x.sentNs is the send time on
// now's clock (see writeRequest). When the dispatcher already wrote j on an
// idle connection (j.pre, see preWrite), that is the first attempt. The
// body is then x.conn.body.
//
// A request is sent a second time only when it provably never reached the
// server: it went on a reused connection, the server closed that connection
// (errNoResponse), and nothing of a response was read. HTTP lets a server
// close an idle persistent connection at any moment (RFC 9112 §9.6), so a
// request can cross the server's FIN on the wire; the server, which had
// finished with the connection, never handles it. The second attempt always
// dials a new connection: the other idle ones may be just as dead.
func (x *h1Exchange) roundTrip(ctx context.Context, j *job, now func() int64) error {
	for attempt := 0; ; attempt++ {
		var (
			c      *h1Conn
			reused bool
			off    int // bytes of the request already written
			err    error
		)
		switch {
		case attempt == 0 && j.pre != nil:
			c, reused, off, err = j.pre, true, j.preOff, j.preErr
			j.pre = nil
		case attempt == 0:
			c, reused, err = x.pool.get(ctx)
		default:
			c, err = x.pool.dial(ctx)
		}
		if c == nil {
			return err
		}
		x.conn = c
		x.stop = context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
		if err == nil {
			err = x.exchange(j.wire, now, off)
		} else {
			err = noResponse(err)
		}
		if err == nil {
			x.keep = x.keep && !j.closeConn
			return nil
		}
		x.stop()
		_ = c.nc.Close()
		x.conn = nil
		if !reused || attempt > 0 || ctx.Err() != nil || !errors.Is(err, errNoResponse) {
			return err
		}
		x.resent = true
	}
}

// preWrite writes j on an idle connection of p, if there is one, from the
// dispatcher's goroutine: the send then happens when its time comes rather
// than when the request's goroutine (or coroutine) first runs. It returns
// the send time (see writeRequest), or 0 when there was no idle connection
// or the request did not fit in the socket at once (the connection does not
// wait; the request's goroutine or coroutine writes the rest and stamps the
// send).
func (p *h1Pool) preWrite(j *job, now func() int64) int64 {
	c := p.idleConn()
	if c == nil {
		return 0
	}
	j.pre = c
	var sent int64
	j.preOff, sent, j.preErr = writeRequest(c.nc, p.prefix, j.wire, 0, false, now)
	if j.preErr != nil {
		return 0
	}
	return sent
}

// peerCloser is a connection that knows without a system call whether the
// server has closed it (the reactor's, from epoll's RDHUP).
type peerCloser interface{ peerClosed() bool }

// peerClosed reports whether the server has closed the idle connection nc
// (a FIN or a reset arrived).
func peerClosed(nc net.Conn) bool {
	if pc, ok := nc.(peerCloser); ok {
		return pc.peerClosed()
	}
	return peekClosed(nc)
}

// vectorWriter is a connection that writes a request's two parts itself
// with writev(2), from a byte offset, waiting for room or not, and stamps
// the send (the reactor's connections; on Linux the goroutine path's too).
type vectorWriter interface {
	writeFrom(a, b []byte, off int, wait bool, now func() int64) (off2 int, sent int64, err error)
}

// writeRequest writes prefix+wire on nc from byte off on and returns how
// far it got and, once the request is all written, its send time: now()
// read immediately before the writev(2) that handed the kernel its last
// byte. Nothing runs between that clock read and the system call, and
// nothing the server does can precede it, so a send time is never later
// than the server's receipt, whatever the scheduler does after the write
// (a write that wakes the server can preempt the writer before it reads a
// clock again: stamped after the write, sends then read up to milliseconds
// late and TTFT short). Only a vectorWriter can stop early (wait false);
// any other connection writes everything and is stamped before it starts.
func writeRequest(nc net.Conn, prefix, wire []byte, off int, wait bool, now func() int64) (int, int64, error) {
	if vw, ok := nc.(vectorWriter); ok {
		return vw.writeFrom(prefix, wire, off, wait, now)
	}
	bufs := net.Buffers{prefix, wire}
	if off >= len(prefix) {
		bufs = net.Buffers{wire[off-len(prefix):]}
	} else {
		bufs[0] = prefix[off:]
	}
	t := now()
	n, err := bufs.WriteTo(nc)
	if err != nil {
		return off + int(n), 0, err
	}
	return off + int(n), t, nil
}

var aLongTimeAgo = time.Unix(1, 0)

func (x *h1Exchange) exchange(wire []byte, now func() int64, off int) error {
	c := x.conn
	if off < len(x.pool.prefix)+len(wire) {
		_, sent, err := writeRequest(c.nc, x.pool.prefix, wire, off, true, now)
		if err != nil {
			return noResponse(err)
		}
		x.sentNs = sent
	}
	if c.pending {
		n, err := io.Copy(io.Discard, io.LimitReader(&c.body, h1DrainMax))
		if err == nil && n == h1DrainMax {
			err = errors.New("more than 64 KiB after [DONE]")
		}
		if err != nil {
			err = fmt.Errorf("reading the end of the previous response: %w", err)
			if errors.Is(err, io.ErrUnexpectedEOF) { // closed after [DONE], before the terminator
				return fmt.Errorf("%w: %w", errNoResponse, err)
			}
			return noResponse(err)
		}
		c.pending = false
	}
	h, err := readResponseHead(c.br, &c.body)
	if err != nil {
		return err
	}
	x.status, x.keep = h.status, h.keep
	c.idleMax = h.idleMax
	return nil
}

// release ends the exchange: the connection goes back to the pool when the
// response ended as it should (done: the stream reached [DONE], or an error
// status's body was read) and nothing cancelled it; otherwise it is closed.
func (x *h1Exchange) release(done bool) {
	c := x.conn
	if c == nil {
		return
	}
	x.conn = nil
	canceled := !x.stop()
	if !done || !x.keep || canceled || c.body.rem < 0 {
		_ = c.nc.Close()
		return
	}
	c.pending = !c.body.eof
	x.pool.put(c)
}
