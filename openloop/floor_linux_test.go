//go:build linux

package openloop

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/mbench/mbench/openloop/stub"

	"golang.org/x/sys/unix"
)

// The floor client: the least a client can do per streamed request and still
// time every token by its own read, the baseline that BenchmarkStreamedRequestCPU
// (io=floor) sets beside the load generator. One locked thread sends prepared
// requests at Poisson times on keep-alive connections (a timerfd paces it, in
// the same epoll_wait as the streams), reads each connection with recvmsg(2)
// and SO_TIMESTAMPNS when epoll reports it (edge-triggered; a short read ends
// the drain), reads the clock once per read, and coalesces its waits to the
// reactor's tick exactly as reactor.wait does. It parses nothing: a response
// counts when its first read begins with a 200 status line and ends when the
// bytes read end with the chunked terminator. What it costs per extra token is
// the kernel's work per read plus a loop that does nothing else, so the load
// generator's cost per extra chunk, less the floor's, is what mbench itself
// adds to a token.

// floorResult is what a floor run did.
type floorResult struct {
	sent, done, failed int // requests written; responses ended with the terminator; with another status or cut
	reads              int64
	wakes, unstamped   int64 // waits that returned connection events; reads without the kernel's receive time
}

// floorConn is one keep-alive connection of the floor client.
type floorConn struct {
	fd    int
	busy  bool // a request is out on it
	first bool // the next read is its response's first
	tail  []byte
	msg   unix.Msghdr
	iov   unix.Iovec
	oob   [64]byte
}

// floorEnd is the end of a chunked body: the last chunk's CRLF, the zero
// chunk and the empty trailer.
var floorEnd = []byte("\r\n0\r\n\r\n")

// runFloor drives rate req/s of input-token prompts asking output tokens at
// target (http://host:port) for dur, and waits up to drain for the streams
// still open.
func runFloor(target string, batched bool, rate float64, dur, drain time.Duration, model string, input, output int, seed uint64) (floorResult, error) {
	var res floorResult
	u, err := url.Parse(target)
	if err != nil {
		return res, err
	}
	ap, err := netip.ParseAddrPort(u.Host)
	if err != nil {
		return res, fmt.Errorf("floor client: %s: %w", target, err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	const distinct = 64 // prompts, generated before the run and sent in turn
	reqs := make([][]byte, distinct)
	for i := range reqs {
		toks := make([]int32, input)
		for k := range toks {
			toks[k] = int32(rng.IntN(32000))
		}
		body := appendCompletionBody(nil, model, toks, output, &defaultTail)
		head := "POST /v1/completions HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
		reqs[i] = append([]byte(head), body...)
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	setTimerSlack()
	stampKeeper()
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return res, err
	}
	defer unix.Close(epfd)
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return res, err
	}
	defer unix.Close(tfd)
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, tfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: -1}); err != nil {
		return res, err
	}
	var conns []*floorConn // by epoll id − 1
	var idle []*floorConn
	defer func() {
		for _, c := range conns {
			unix.Close(c.fd)
		}
	}()
	dial := func() (*floorConn, error) {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
			unix.Close(fd)
			return nil, err
		}
		_ = unix.SetNonblock(fd, true)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
		c := &floorConn{fd: fd, tail: make([]byte, 0, 2*len(floorEnd))}
		conns = append(conns, c)
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(len(conns))}); err != nil {
			return nil, err
		}
		return c, nil
	}
	mono := func() int64 {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		return ts.Nano()
	}

	start := mono()
	end, deadline := start+int64(dur), start+int64(dur+drain)
	next := start
	sent, busy := 0, 0
	var lastWake, prevWake int64
	buf := make([]byte, 16<<10)
	events := make([]unix.EpollEvent, 256)
	var ready []*floorConn
	var ring *uring
	var bufs [][]byte
	if batched {
		if ring, err = newUring(uint32(len(events))); err != nil {
			return res, err
		}
		defer ring.close()
		bufs = make([][]byte, len(events))
		for i := range bufs {
			bufs[i] = make([]byte, 16<<10)
		}
	}
	// took accounts for one read of got bytes into p, and says whether the
	// connection may have more to read (the read filled p).
	took := func(c *floorConn, p []byte, got int, err error) bool {
		if err != nil || got == 0 {
			if c.busy {
				res.failed++
				busy--
			}
			unix.Close(c.fd)
			c.fd, c.busy = -1, false
			return false
		}
		res.reads++
		real := parseRxStamp(c.oob[:c.msg.Controllen])
		if real == 0 {
			res.unstamped++
		}
		floorSink += real ^ time.Now().UnixNano() // the reactor's stamp and clock read
		if !c.busy {
			return got == len(p) // bytes after a response: the stub sends none
		}
		if c.first && !bytes.HasPrefix(p[:got], []byte("HTTP/1.1 200 ")) {
			res.failed++
			c.busy = false
			busy--
			return got == len(p)
		}
		c.first = false
		c.tail = append(c.tail, p[max(0, got-len(floorEnd)):got]...)
		if len(c.tail) > len(floorEnd) {
			c.tail = append(c.tail[:0], c.tail[len(c.tail)-len(floorEnd):]...)
		}
		if bytes.Equal(c.tail, floorEnd) {
			res.done++
			c.busy = false
			busy--
			idle = append(idle, c)
		}
		return got == len(p)
	}
	for {
		now := mono()
		for next <= now && next < end {
			var c *floorConn
			for len(idle) > 0 && c == nil {
				c, idle = idle[len(idle)-1], idle[:len(idle)-1]
				if c.fd < 0 { // closed by the server while idle
					c = nil
				}
			}
			if c == nil {
				c, err = dial()
			}
			if err != nil {
				return res, fmt.Errorf("floor client: dial: %w", err)
			}
			if n, err := unix.Write(c.fd, reqs[sent%distinct]); err != nil || n != len(reqs[sent%distinct]) {
				return res, fmt.Errorf("floor client: write: %d bytes, %v", n, err)
			}
			c.busy, c.first, c.tail = true, true, c.tail[:0]
			sent++
			res.sent++
			busy++
			next += int64(rng.ExpFloat64() / rate * 1e9)
		}
		if next >= end && busy == 0 || now > deadline {
			break
		}
		if next < end {
			spec := unix.ItimerSpec{Value: unix.NsecToTimespec(next)}
			if err := unix.TimerfdSettime(tfd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
				return res, err
			}
		}
		// reactor.wait's coalescing, with the next send as its bound.
		n := 0
		if lastWake-prevWake < 2*int64(readTick) {
			until := min(lastWake+int64(readTick), next)
			if d := until - mono(); d > int64(20*time.Microsecond) {
				ts := unix.NsecToTimespec(d)
				_ = unix.Nanosleep(&ts, nil)
			}
			n, err = unix.EpollWait(epfd, events, 0)
		}
		if n == 0 && err == nil {
			n, err = unix.EpollWait(epfd, events, 100)
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				err = nil
				continue
			}
			return res, err
		}
		ready = ready[:0]
		for _, ev := range events[:n] {
			if ev.Fd > 0 {
				ready = append(ready, conns[ev.Fd-1])
			}
		}
		if len(ready) > 0 {
			res.wakes++
			prevWake, lastWake = lastWake, mono()
		}
		for len(ready) > 0 {
			if !batched {
				for _, c := range ready {
					for c.fd >= 0 {
						got, err := c.recv(buf)
						if errors.Is(err, unix.EAGAIN) || !took(c, buf, got, err) {
							break
						}
					}
				}
				break
			}
			// One io_uring_enter for every ready connection's read; those
			// whose read filled the buffer are read again in the next batch.
			k := 0
			for _, c := range ready {
				if c.fd >= 0 {
					c.prepare(bufs[k])
					ring.recvmsg(c.fd, &c.msg, uint64(k))
					ready[k] = c
					k++
				}
			}
			if k == 0 {
				break
			}
			again := ready[k:k]
			if err := ring.submitWait(k, func(tag uint64, r int32) {
				c := ready[tag]
				got, err := int(r), error(nil)
				if r < 0 {
					got, err = 0, unix.Errno(-r)
				}
				if !errors.Is(err, unix.EAGAIN) && took(c, bufs[tag], got, err) {
					again = append(again, c)
				}
			}); err != nil {
				return res, err
			}
			ready = append(ready[:0], again...)
		}
	}
	return res, nil
}

// floorSink keeps the floor client's stamps and clock reads live.
var floorSink int64

// prepare points c's message header at p and its control buffer.
func (c *floorConn) prepare(p []byte) { pointMsg(&c.msg, &c.iov, p, c.oob[:]) }

// recv is rconn.recv's read: recvmsg(2) with the receive-time control
// message.
func (c *floorConn) recv(p []byte) (int, error) {
	c.prepare(p)
	r, _, errno := unix.Syscall(unix.SYS_RECVMSG, uintptr(c.fd), uintptr(unsafe.Pointer(&c.msg)), 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// streamedIOs are BenchmarkStreamedRequestCPU's sub-benchmarks, the floor
// client last.
var streamedIOs = []string{"reactor", "reactor-eachwake", "goroutines", "floor", "floor-uring"}

// benchFloor is BenchmarkStreamedRequestCPU's io=floor: the floor client's
// CPU per completed request, with the same stub, rate, prompt and output.
func benchFloor(b *testing.B, p *stub.Process, batched bool, rate float64, dur time.Duration, tokens int) {
	for b.Loop() {
		var ru0, ru1 unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
		s0, _ := p.CPUSeconds()
		res, err := runFloor(p.URL, batched, rate, dur, 10*time.Second, "stub-model", 256, tokens, 1)
		s1, _ := p.CPUSeconds()
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
		if err != nil {
			b.Fatal(err)
		}
		if res.failed > 0 || res.done == 0 {
			b.Fatalf("floor client: %d responses, %d failed", res.done, res.failed)
		}
		n := float64(res.done)
		sec := func(t unix.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
		b.ReportMetric(1e3*(sec(ru1.Stime)-sec(ru0.Stime))/n, "client-sys-ms/req")
		b.ReportMetric(float64(ru1.Nvcsw-ru0.Nvcsw)/n, "vol-ctxsw/req")
		b.ReportMetric(float64(res.wakes)/n, "reactor-wakes/req")
		b.ReportMetric(float64(res.unstamped)/n, "unstamped-reads/req")
		b.ReportMetric(1e3*(sec(ru1.Utime)+sec(ru1.Stime)-sec(ru0.Utime)-sec(ru0.Stime))/n, "client-cpu-ms/req")
		b.ReportMetric(1e3*(s1-s0)/n, "stub-cpu-ms/req")
		b.ReportMetric(n/(rate*dur.Seconds()), "achieved/offered")
	}
}

// BenchmarkBareSyscall is the cheapest system call, getppid(2): the entry
// and exit that every read pays, which sets one host's cost of a system call
// beside another's (gpu/loadpath/run.sh quotes it with the floor).
func BenchmarkBareSyscall(b *testing.B) {
	for b.Loop() {
		unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0)
	}
}

// TestFloorClient holds the benchmark's baseline to the stub's own log, over
// both of its read paths: every request it wrote was handled once, streamed
// all its tokens and was counted as ended, none failed, and its reads carried
// the kernel's receive times (but for the few of the kernel's deferred start).
func TestFloorClient(t *testing.T) {
	const tokens = 8
	s := startStub(t, stub.Options{Tokens: tokens, FirstToken: 2 * time.Millisecond, Gap: time.Millisecond})
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			s.Reset()
			res, err := runFloor(s.URL, batched, 300, 500*time.Millisecond, 10*time.Second, "stub-model", 64, tokens, 1)
			if batched && (errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM)) {
				t.Skipf("no io_uring here: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			entries := s.Entries()
			if res.sent < 100 || res.done != res.sent || res.failed != 0 || len(entries) != res.sent {
				t.Fatalf("sent %d, ended %d, failed %d; the stub handled %d", res.sent, res.done, res.failed, len(entries))
			}
			for _, e := range entries {
				if e.Chunks != tokens {
					t.Fatalf("the stub sent %d tokens of %d to a request", e.Chunks, tokens)
				}
			}
			if res.reads < int64(res.sent) || res.unstamped > 3 {
				t.Fatalf("%d reads for %d responses, %d without a receive time", res.reads, res.sent, res.unstamped)
			}
		})
	}
}
