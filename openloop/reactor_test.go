//go:build linux

package openloop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
	"golang.org/x/sys/unix"
)

// rawServer accepts on 127.0.0.1 and hands each connection to serve.
func rawServer(t *testing.T, lc net.ListenConfig, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); serve(c) }()
		}
	}()
	return "http://" + ln.Addr().String()
}

// readRequest reads one request (head and Content-Length body).
func readRequest(br *bufio.Reader) (*http.Request, []byte, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(req.Body)
	return req, body, err
}

const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// sseChunk frames one SSE event as an HTTP chunk.
func sseChunk(data string) string {
	ev := "data: " + data + "\n\n"
	return fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev)
}

// TestReactorDataThenFIN: the server writes the head and one token and
// closes, all at once, so the FIN comes with the data and raises no event
// of its own. Each request must fail at once as a cut stream, not wait for
// its 30 s timeout. (Reading the socket only after an edge would miss it;
// the reactor reads a connection whose event said RDHUP to its end.)
func TestReactorDataThenFIN(t *testing.T) {
	url := rawServer(t, net.ListenConfig{}, func(c net.Conn) {
		if _, _, err := readRequest(bufio.NewReader(c)); err != nil {
			return
		}
		_, _ = io.WriteString(c, sseHead+sseChunk(`{"choices":[{"text":" a"}]}`))
	})
	_, res := runIO(t, Config{Targets: []string{url}, Model: "m", Rate: 100, Shape: Shape{Input: 8, Output: 4}, Requests: 40,
		RequestTimeout: 30 * time.Second}, "reactor")
	if len(res.Records) != 40 {
		t.Fatalf("%d records, want 40", len(res.Records))
	}
	for _, r := range res.Records {
		if r.OK() || r.Error != "unexpected EOF" || r.ErrorClass != ErrClassConnReset {
			t.Errorf("record %d: %s %q (%s), want a cut stream (unexpected EOF)", r.ID, r.Status, r.Error, r.ErrorClass)
		}
		// Logical bound: before the 30 s request timeout.
		if d := time.Duration(r.DoneNs - r.SentNs); d >= 30*time.Second {
			t.Errorf("record %d took %v to see the close: it waited for its timeout", r.ID, d)
		}
	}
}

// TestReactorLargeRequest: a request twice the size of the largest send
// buffer the kernel grants (tcp_wmem), to a server that starts reading only
// after 300 ms, through a 4 KiB receive buffer, so the client's writes stop
// on a full socket (EAGAIN) and resume on EPOLLOUT, the second request's
// after the dispatcher's early write took what fitted. The server gets
// every byte, and each send is stamped when its last byte was written,
// after the server began reading.
func TestReactorLargeRequest(t *testing.T) {
	input := 2 * tcpWmemMax(t) / 5 // token ids take 5–6 bytes each
	var mu sync.Mutex
	var readAt []time.Time
	var prompts []int
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	url := rawServer(t, lc, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			time.Sleep(300 * time.Millisecond)
			mu.Lock()
			readAt = append(readAt, time.Now())
			mu.Unlock()
			_, body, err := readRequest(br)
			if err != nil {
				return
			}
			var req struct {
				Prompt []int `json:"prompt"`
			}
			if err := json.Unmarshal(body, &req); err != nil {
				t.Errorf("request body: %v", err)
				return
			}
			mu.Lock()
			prompts = append(prompts, len(req.Prompt))
			mu.Unlock()
			_, _ = io.WriteString(c, sseHead+sseChunk(`{"choices":[{"text":" a"}],"usage":null}`)+
				sseChunk(`{"choices":[],"usage":{"prompt_tokens":`+strconv.Itoa(input)+`,"completion_tokens":1}}`)+
				sseChunk("[DONE]")+"0\r\n\r\n")
		}
	})
	res, err := Run(context.Background(), Config{Targets: []string{url}, Model: "m", Rate: 1,
		Arrival: Arrival{Process: ArrivalConstant}, Shape: Shape{Input: input, Output: 1}, Requests: 2})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(prompts) != 2 || prompts[0] != input || prompts[1] != input {
		t.Fatalf("server read prompts of %v tokens, want 2 of %d", prompts, input)
	}
	for i, r := range res.Records {
		if !r.OK() {
			t.Fatalf("record %d: %s", r.ID, r.Error)
		}
		sent := res.Start.Add(time.Duration(r.SentNs))
		t.Logf("record %d: sched %v sent %v, read %v", r.ID, time.Duration(r.ScheduledNs), time.Duration(r.SentNs), readAt[i].Sub(res.Start))
		if sent.Before(readAt[i]) {
			t.Errorf("record %d stamped sent %v before the server began reading it", r.ID, readAt[i].Sub(sent))
		}
	}
}

// tcpWmemMax is the largest TCP send buffer (the third field of tcp_wmem).
func tcpWmemMax(t *testing.T) int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	if err != nil {
		t.Skip("no /proc/sys/net/ipv4/tcp_wmem")
	}
	f := strings.Fields(string(b))
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil || n <= 0 {
		t.Fatalf("tcp_wmem %q", b)
	}
	return n
}

// TestReactorLeavesNothing: runs over the reactor end with their
// goroutines (the loop, its coroutines) and descriptors (epoll, eventfd,
// timerfd, sockets) gone.
func TestReactorLeavesNothing(t *testing.T) {
	s := startStub(t, stub.Options{Tokens: 3})
	run := func() {
		t.Helper()
		if _, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "stub-model", Rate: 500,
			Shape: Shape{Input: 8, Output: 3}, Requests: 50}); err != nil {
			t.Fatal(err)
		}
	}
	run()
	g0, f0 := runtime.NumGoroutine(), openFDs(t)
	for range 20 {
		run()
	}
	deadline := time.Now().Add(10 * time.Second)
	g, f := runtime.NumGoroutine(), openFDs(t)
	for (g > g0+2 || f > f0+5) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		g, f = runtime.NumGoroutine(), openFDs(t)
	}
	if g > g0+2 || f > f0+5 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("after 20 runs: %d goroutines (%d before), %d descriptors (%d before)\n%s", g, g0, f, f0,
			strings.Join(strings.SplitN(string(buf), "\n\n", 20), "\n\n"))
	}
}

// TestRxStampIsArrival: bytes that wait 30 ms in the socket before the
// reactor reads them are stamped when they arrived (the kernel's receive
// time, on the run's clock), not when they were read. (The kernel turns
// timestamps on in deferred work: a connection whose bytes came unstamped
// is tried again, up to 20 times.)
func TestRxStampIsArrival(t *testing.T) {
	for attempt := 1; ; attempt++ {
		if rxStampOnce(t) || attempt == 20 {
			return
		}
	}
}

// rxStampOnce is one attempt of TestRxStampIsArrival; false: unstamped.
func rxStampOnce(t *testing.T) bool {
	wrote := make(chan [2]time.Time, 1)
	url := rawServer(t, net.ListenConfig{}, func(c net.Conn) {
		t0 := time.Now()
		_, _ = io.WriteString(c, "hello")
		wrote <- [2]time.Time{t0, time.Now()}
		_, _ = io.Copy(io.Discard, c)
	})
	clk := &clock{start: time.Now()}
	var at, readAt int64
	var w [2]time.Time
	var stamped bool
	onReactorConn(t, url, clk, func(c *rconn) error {
		w = <-wrote // (a buffered channel: the reactor waits only for the write)
		time.Sleep(30 * time.Millisecond)
		buf := make([]byte, 16)
		n, err := c.Read(buf)
		readAt = clk.now()
		if err == nil && string(buf[:n]) != "hello" {
			err = fmt.Errorf("read %q", buf[:n])
		}
		at = c.arrived()
		stamped = c.rx.real != 0
		return err
	})
	if !stamped {
		t.Log("read unstamped; again")
		return false
	}
	lo, hi := int64(w[0].Sub(clk.start)), int64(w[1].Sub(clk.start))
	t.Logf("written %v..%v, stamped %v, read %v", time.Duration(lo), time.Duration(hi), time.Duration(at), time.Duration(readAt))
	if at < lo-int64(time.Microsecond) || at > hi+int64(time.Millisecond) || readAt-at < int64(25*time.Millisecond) {
		t.Errorf("stamped %v: want within the write (%v..%v), 30 ms before the read at %v", time.Duration(at), time.Duration(lo), time.Duration(hi), time.Duration(readAt))
	}
	return true
}

// TestRxStampMissesCounted: a connection whose reads come without receive
// times although it asked for them (a sandbox that takes the option and
// gives none) makes the reactor count it unstamped, after the few reads of
// the kernel's deferred start, so that the loop stops coalescing its waits.
func TestRxStampMissesCounted(t *testing.T) {
	url := rawServer(t, net.ListenConfig{}, func(c net.Conn) {
		for range 5 {
			_, _ = io.WriteString(c, "x")
			time.Sleep(2 * time.Millisecond)
		}
		_, _ = io.Copy(io.Discard, c)
	})
	re := onReactorConn(t, url, &clock{start: time.Now()}, func(c *rconn) error {
		if !c.rx.on {
			return fmt.Errorf("receive times not on")
		}
		_ = unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 0) // the option "taken", nothing given
		buf := make([]byte, 1)
		for range 5 {
			if _, err := c.Read(buf); err != nil {
				return err
			}
		}
		return nil
	})
	if n := re.unstamped.Load(); n != 1 {
		t.Errorf("unstamped %d after 5 reads without times, want 1", n)
	}
}

// onReactorConn dials url from a coroutine of a new reactor (with a clock,
// so receive times are on) and runs fn on the connection there.
func onReactorConn(t *testing.T, url string, clk *clock, fn func(c *rconn) error) *reactor {
	t.Helper()
	re, err := newReactor()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(re.close)
	re.clk = clk
	ap, err := netip.ParseAddrPort(strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	re.submit(func() {
		nc, err := re.dial(context.Background(), ap)
		if err != nil {
			done <- err
			return
		}
		defer nc.Close()
		done <- fn(nc.(*rconn))
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return re
}
