package openloop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
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

// idleConn returns an idle connection, or nil.
func (p *h1Pool) idleConn() *h1Conn {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if now.Sub(c.idleAt) < h1IdleMax {
			return c
		}
		_ = c.nc.Close()
	}
	return nil
}

func (p *h1Pool) dial(ctx context.Context) (*h1Conn, error) {
	var nc net.Conn
	var err error
	if p.re != nil {
		nc, err = p.re.dial(ctx, p.ap)
	} else {
		nc, err = p.dialer.DialContext(ctx, "tcp", p.addr)
	}
	if err != nil {
		return nil, err
	}
	return &h1Conn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10)}, nil
}

// put returns c to the pool (or closes it once the pool is closed).
func (p *h1Pool) put(c *h1Conn) {
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
	keep   bool // the connection may be reused after the body
	stop   func() bool
}

// errNoResponse marks a reused connection that the server had closed: the
// request is sent again on a new connection.
var errNoResponse = errors.New("connection closed before the response")

// roundTrip writes the prepared request j.wire (headers after Host, blank
// line, body) and reads the response head. sent is called right after the
// request has been written. When the dispatcher already wrote j on an idle
// connection (j.pre, see preWrite), that is the first attempt. The body is
// then x.conn.body.
func (x *h1Exchange) roundTrip(ctx context.Context, j *job, sent func()) error {
	for attempt := 0; ; attempt++ {
		var (
			c      *h1Conn
			reused bool
			off    int // bytes of the request already written
			err    error
		)
		if attempt == 0 && j.pre != nil {
			c, reused, off, err = j.pre, true, j.preOff, j.preErr
			j.pre = nil
		} else if c, reused, err = x.pool.get(ctx); err != nil {
			return err
		}
		x.conn = c
		x.stop = context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
		if err == nil {
			err = x.exchange(j.wire, sent, off)
		} else {
			err = fmt.Errorf("%w: %w", errNoResponse, err)
		}
		if err == nil {
			return nil
		}
		x.stop()
		_ = c.nc.Close()
		x.conn = nil
		if !reused || attempt > 0 || ctx.Err() != nil || !errors.Is(err, errNoResponse) {
			return err
		}
	}
}

// preWrite writes j on an idle connection of p, if there is one, from the
// dispatcher's goroutine: the send then happens when its time comes rather
// than when the request's goroutine (or coroutine) first runs. It returns
// the time the write ended, or 0 when there was no idle connection or the
// request did not fit in the socket at once (a reactor connection does not
// wait; the request's coroutine writes the rest and stamps the send).
func (p *h1Pool) preWrite(j *job, now func() int64) int64 {
	c := p.idleConn()
	if c == nil {
		return 0
	}
	j.pre = c
	j.preOff, j.preErr = writeRequest(c.nc, p.prefix, j.wire, 0, false)
	if j.preErr != nil || j.preOff < len(p.prefix)+len(j.wire) {
		return 0
	}
	return now()
}

// vectorWriter is a connection that writes a request's two parts itself,
// from a byte offset, waiting for room or not (the reactor's connections).
type vectorWriter interface {
	writeFrom(a, b []byte, off int, wait bool) (int, error)
}

// writeRequest writes prefix+wire on nc from byte off on and returns how
// far it got. Only a vectorWriter can stop early (wait false); any other
// connection writes everything, with one writev.
func writeRequest(nc net.Conn, prefix, wire []byte, off int, wait bool) (int, error) {
	if vw, ok := nc.(vectorWriter); ok {
		return vw.writeFrom(prefix, wire, off, wait)
	}
	bufs := net.Buffers{prefix, wire}
	if off >= len(prefix) {
		bufs = net.Buffers{wire[off-len(prefix):]}
	} else {
		bufs[0] = prefix[off:]
	}
	n, err := bufs.WriteTo(nc)
	return off + int(n), err
}

var aLongTimeAgo = time.Unix(1, 0)

func (x *h1Exchange) exchange(wire []byte, sent func(), off int) error {
	c := x.conn
	if off < len(x.pool.prefix)+len(wire) {
		if _, err := writeRequest(c.nc, x.pool.prefix, wire, off, true); err != nil {
			return fmt.Errorf("%w: %w", errNoResponse, err)
		}
		sent()
	}
	if c.pending {
		n, err := io.Copy(io.Discard, io.LimitReader(&c.body, h1DrainMax))
		if err == nil && n == h1DrainMax {
			err = errors.New("more than 64 KiB after [DONE]")
		}
		if err != nil {
			return fmt.Errorf("%w: reading the end of the previous response: %w", errNoResponse, err)
		}
		c.pending = false
	}
	status, keep, err := readResponseHead(c.br, &c.body)
	if err != nil {
		return err
	}
	x.status, x.keep = status, keep
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

// errMalformedHTTP marks a response that is not valid HTTP/1.1.
var errMalformedHTTP = errors.New("malformed HTTP response")

// readResponseHead reads the status line and headers into body's framing.
// It skips 1xx responses. keep reports whether the connection may be reused.
func readResponseHead(br *bufio.Reader, body *h1Body) (status int, keep bool, err error) {
	for first := true; ; first = false {
		line, err := readHeadLine(br)
		if err != nil {
			if first && errors.Is(err, io.EOF) {
				return 0, false, fmt.Errorf("%w: %w", errNoResponse, io.EOF)
			}
			return 0, false, err
		}
		// HTTP/1.x SSS reason
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
			return 0, false, fmt.Errorf("%w: status line %.80q", errMalformedHTTP, line)
		}
		status, err = strconv.Atoi(string(line[9:12]))
		if err != nil || status < 100 {
			return 0, false, fmt.Errorf("%w: status line %.80q", errMalformedHTTP, line)
		}
		http11 := line[7] == '1'
		keep = http11
		*body = h1Body{br: br, rem: -1}
		haveLen := false
		for n := 0; ; n++ {
			h, err := readHeadLine(br)
			if err != nil {
				return 0, false, unexpectedEOF(err)
			}
			if len(h) == 0 {
				break
			}
			if n > 200 {
				return 0, false, fmt.Errorf("%w: more than 200 header lines", errMalformedHTTP)
			}
			name, value, ok := bytes.Cut(h, []byte(":"))
			if !ok {
				return 0, false, fmt.Errorf("%w: header line %.80q", errMalformedHTTP, h)
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				v, err := strconv.ParseInt(string(value), 10, 64)
				if err != nil || v < 0 {
					return 0, false, fmt.Errorf("%w: Content-Length %.40q", errMalformedHTTP, value)
				}
				body.rem, haveLen = v, true
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				body.chunked = http11 && bytes.EqualFold(value, []byte("chunked")) // as net/http: not in HTTP/1.0
			case bytes.EqualFold(name, []byte("Connection")):
				if bytes.EqualFold(value, []byte("close")) {
					keep = false
				}
			}
		}
		if status >= 100 && status < 200 && status != 101 {
			continue
		}
		switch {
		case body.chunked:
			body.rem = 0
		case status == 204 || status == 304:
			body.rem = 0
		case !haveLen:
			keep = false // read to the connection's end
		}
		body.eof = !body.chunked && body.rem == 0
		return status, keep, nil
	}
}

// readHeadLine reads one line of a response head without its CRLF; lines
// longer than the reader's buffer are refused.
func readHeadLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: header line longer than %d bytes", errMalformedHTTP, br.Size())
		}
		return nil, err
	}
	return trimEOL(line), nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// h1Body reads a response body: chunked (rem is what is left of the current
// chunk), Content-Length (rem is what is left) or until the connection
// closes (rem < 0).
type h1Body struct {
	br      *bufio.Reader
	chunked bool
	rem     int64
	crlf    bool // a chunk's data ended; its CRLF is still to be read
	eof     bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.chunked {
		if b.crlf {
			if err := b.readCRLF(); err != nil {
				return 0, err
			}
		}
		if b.rem == 0 {
			n, err := b.chunkSize()
			if err != nil {
				return 0, err
			}
			if n == 0 {
				if err := b.trailer(); err != nil {
					return 0, err
				}
				b.eof = true
				return 0, io.EOF
			}
			b.rem = n
		}
	}
	if b.rem >= 0 && int64(len(p)) > b.rem {
		p = p[:b.rem]
	}
	n, err := b.br.Read(p)
	if b.rem >= 0 {
		b.rem -= int64(n)
		if b.rem == 0 {
			if b.chunked {
				b.crlf = true
			} else {
				b.eof = true
			}
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
	} else if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *h1Body) readCRLF() error {
	line, err := b.br.ReadSlice('\n')
	if err != nil {
		return unexpectedEOF(err)
	}
	if len(trimEOL(line)) != 0 {
		return fmt.Errorf("%w: no CRLF after a chunk", errMalformedHTTP)
	}
	b.crlf = false
	return nil
}

// chunkSize reads a chunk-size line (extensions ignored).
func (b *h1Body) chunkSize() (int64, error) {
	line, err := readHeadLine(b.br)
	if err != nil {
		return 0, unexpectedEOF(err)
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimSpace(line)
	n, err := strconv.ParseInt(string(line), 16, 64)
	if err != nil || n < 0 || len(line) > 12 {
		return 0, fmt.Errorf("%w: chunk size %.40q", errMalformedHTTP, line)
	}
	return n, nil
}

// trailer reads the trailer fields after the last chunk, up to the blank line.
func (b *h1Body) trailer() error {
	for n := 0; n < 100; n++ {
		line, err := readHeadLine(b.br)
		if err != nil {
			return unexpectedEOF(err)
		}
		if len(line) == 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: trailer longer than 100 lines", errMalformedHTTP)
}
