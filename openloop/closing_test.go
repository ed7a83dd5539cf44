//go:build linux

package openloop

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/longrun"
)

// closingServer reproduces how llama.cpp's llama-server (through its
// vendored cpp-httplib) ends a streamed response, read in the llama.cpp
// tree that node-llama-cpp@3.21.1 ships (llama/llama.cpp.info.json: tag
// v0.4.0; the tree the project's real-engine build compiles) and in
// cpp-httplib upstream at 6494edd8c03c55165825ae3078e2f55c595d8cb6:
//
//   - The stream's content provider returns has_next, false after the last
//     chunk (tools/server/server-http.cpp:565-569): sink.done() writes the
//     chunked terminator "0\r\n" and "\r\n" as two writes (vendor/cpp-httplib/
//     httplib.cpp:4102-4119; upstream httplib.h:8424-8441), then the false
//     return makes write_content_chunked fail with Error::Canceled
//     (httplib.cpp:4132-4134; httplib.h:8454-8456), write_response_core
//     return false (httplib.cpp:8610-8616; httplib.h:12676-12682), and the
//     keep-alive loop break (httplib.cpp:1872-1873; httplib.h:6301-6302).
//   - All the while the response head said "Keep-Alive: timeout=5, max=100"
//     (httplib.cpp:8563-8573; httplib.h:12629-12639): "Connection: close"
//     only when the request asked for it, on the 100th request of the
//     connection (close_connection = count == 1, httplib.cpp:1870;
//     httplib.h:6299), or for a status of 400 and up.
//   - The socket is then closed by drain_and_close_socket: shutdown(SHUT_WR)
//     (the FIN goes out at once), up to 100 ms and 1 MiB of whatever the
//     client sends read and discarded, then close (httplib.cpp:1923-1949;
//     httplib.h:6352-6378) — so a request written on that connection after
//     the response is acknowledged by the kernel, read, and never handled.
//   - Accepted sockets keep Nagle on (CPPHTTPLIB_TCP_NODELAY false,
//     httplib.h:154; applied at httplib.h:13174).
//   - The stream ends with "data: [DONE]\n\n" (tools/server/
//     server-context.cpp:4439).
//
// Options vary when it closes, as other servers and proxies do.
type closingServer struct {
	url    string
	closeH bool // every response says Connection: close (a server that announces it)
	// random: each response ends in one of several ways at random (see
	// fate): closed after a random delay, kept open, closed before the
	// chunked terminator, or cut mid-stream.
	random bool
	tokens int

	mu      sync.Mutex
	rng     *rand.Rand
	handled map[string]int  // X-Request-Id → times its handler ran
	cut     map[string]bool // requests failed on purpose (fateCutStream, fateDrop)
	conns   atomic.Int64    // connections accepted
	drained atomic.Int64    // bytes read and discarded after a response's close (requests that crossed the FIN)
}

// fate is how one response ends.
type fate int

const (
	fateClose     fate = iota // terminator, then the FIN (llama-server)
	fateKeep                  // terminator, connection kept for the next request
	fateNoTail                // FIN right after [DONE], before the terminator
	fateCutStream             // FIN after the head and some chunks, before [DONE]
	// fateDrop: the request is handled and the connection closed without a
	// byte of response (a server that fails a request). Only on a new
	// connection: the client must not send it again. (On a reused one it
	// would look exactly like a request that crossed the server's FIN,
	// which HTTP's persistent connections allow and the client sends
	// again; servers close a reused connection only between responses.)
	fateDrop
)

func startClosingServer(t *testing.T, cs *closingServer) *closingServer {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("closing server seed %d", seed)
	cs.rng = rand.New(rand.NewPCG(seed, 33))
	cs.handled, cs.cut = map[string]int{}, map[string]bool{}
	cs.url = rawServer(t, net.ListenConfig{}, func(c net.Conn) {
		cs.conns.Add(1)
		cs.serve(c.(*net.TCPConn))
	})
	return cs
}

// pick draws a response's fate and its delay before the close; fresh: the
// request is the connection's first.
func (cs *closingServer) pick(fresh bool) (fate, time.Duration, int) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !cs.random {
		return fateClose, 0, 0
	}
	delay := time.Duration(cs.rng.IntN(3000)) * time.Microsecond
	if fresh && cs.rng.Float64() < 0.05 {
		return fateDrop, 0, 0
	}
	switch p := cs.rng.Float64(); {
	case p < 0.45:
		return fateClose, delay, 0
	case p < 0.75:
		return fateKeep, 0, 0
	case p < 0.9:
		return fateNoTail, delay, 0
	default:
		return fateCutStream, 0, cs.rng.IntN(cs.tokens)
	}
}

func (cs *closingServer) serve(c *net.TCPConn) {
	_ = c.SetNoDelay(false)
	br := bufio.NewReader(c)
	for count := 100; count > 0; count-- {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second)) // keep-alive timeout
		req, err := http.ReadRequest(br)
		if err != nil {
			break
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			break
		}
		id := req.Header.Get("X-Request-Id")
		f, delay, cutAfter := cs.pick(count == 100)
		cs.mu.Lock()
		cs.handled[id]++
		if f == fateCutStream || f == fateDrop {
			cs.cut[id] = true
		}
		cs.mu.Unlock()
		if f == fateDrop {
			_ = c.Close()
			return
		}
		closeConn := cs.closeH || count == 1 || hasToken([]byte(req.Header.Get("Connection")), "close")
		head := "HTTP/1.1 200 OK\r\n"
		if closeConn {
			head += "Connection: close\r\n"
		} else {
			head += "Keep-Alive: timeout=5, max=100\r\n"
		}
		head += "Content-Type: text/event-stream\r\nServer: llama.cpp\r\nTransfer-Encoding: chunked\r\nX-Accel-Buffering: no\r\n\r\n"
		if _, err := io.WriteString(c, head); err != nil {
			break
		}
		for i := range cs.tokens {
			if f == fateCutStream && i == cutAfter {
				_ = c.Close() // cut: the client has read the head at least
				return
			}
			if _, err := io.WriteString(c, sseChunk(`{"choices":[{"index":0,"text":" tok"}]}`)); err != nil {
				return
			}
		}
		tail := sseChunk(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":%d}}`, cs.tokens)) + sseChunk("[DONE]")
		if _, err := io.WriteString(c, tail); err != nil {
			return
		}
		if f == fateNoTail {
			time.Sleep(delay)
			break
		}
		// sink.done(): the terminator, in two writes.
		if _, err := io.WriteString(c, "0\r\n"); err != nil {
			return
		}
		if _, err := io.WriteString(c, "\r\n"); err != nil {
			return
		}
		if f == fateKeep && !closeConn {
			continue
		}
		time.Sleep(delay)
		break
	}
	cs.drainAndClose(c)
}

// drainAndClose is cpp-httplib's drain_and_close_socket.
func (cs *closingServer) drainAndClose(c *net.TCPConn) {
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	n, _ := io.Copy(io.Discard, io.LimitReader(c, 1<<20))
	cs.drained.Add(n)
	_ = c.Close()
}

// TestServerClosesAfterResponse: servers that close the connection after
// each streamed response — as llama-server does while its headers offer
// Keep-Alive, with a Connection: close header, and at random moments (after
// a random delay, before the chunked terminator, mid-stream, right after
// handling the first request of a connection, or not at all) — at a few
// hundred requests a second, over both I/O paths. No request is lost:
// every one completes except those the server failed on purpose, which are
// recorded as closed connections. And the server handles each request
// exactly once: a request is sent again only when the server never
// handled it.
func TestServerClosesAfterResponse(t *testing.T) {
	for _, io := range []string{"reactor", "goroutines"} {
		for _, mode := range []string{"keepalive-header", "close-header", "random"} {
			t.Run(io+"/"+mode, func(t *testing.T) {
				// Side by side in a plain run (each its own server); what
				// they check is counts, not timing.
				longrun.Parallel(t)
				cs := startClosingServer(t, &closingServer{closeH: mode == "close-header", random: mode == "random", tokens: 4})
				const n = 400
				_, res := runIO(t, Config{Targets: []string{cs.url}, Model: "m", Rate: 400, Shape: Shape{Input: 8, Output: 4},
					Warmup: 20, Requests: n, Seed: 7, RequestTimeout: 20 * time.Second}, io)
				cs.mu.Lock()
				defer cs.mu.Unlock()
				if len(res.Records) != n+20 {
					t.Fatalf("%d records, want %d", len(res.Records), n+20)
				}
				resent, failed := 0, 0
				var lost []string
				for _, r := range res.Records {
					if r.Resent {
						resent++
					}
					if got := cs.handled[r.RequestID]; got != 1 {
						t.Errorf("record %d (%s, %s %q): the server handled it %d times, want once", r.ID, r.RequestID, r.Status, r.Error, got)
					}
					if cs.cut[r.RequestID] {
						failed++
						if r.OK() || r.ErrorClass != ErrClassConnReset {
							t.Errorf("record %d: failed by the server but recorded %s %q (%s)", r.ID, r.Status, r.Error, r.ErrorClass)
						}
						continue
					}
					if !r.OK() {
						lost = append(lost, fmt.Sprintf("%d: %s (%s)", r.ID, r.Error, r.ErrorClass))
					}
				}
				if len(lost) > 0 {
					t.Errorf("%d of %d requests lost: %s", len(lost), len(res.Records), strings.Join(lost[:min(len(lost), 10)], "; "))
				}
				if len(cs.handled) != len(res.Records) {
					t.Errorf("the server handled %d distinct requests, the client recorded %d", len(cs.handled), len(res.Records))
				}
				t.Logf("%d requests on %d connections: %d resent after crossing the server's FIN (%d bytes drained by the server), %d failed by the server",
					len(res.Records), cs.conns.Load(), resent, cs.drained.Load(), failed)
			})
		}
	}
}

// TestConnectionCloseHonoured: a request whose headers say Connection:
// close, and responses that say it among other tokens or give a Keep-Alive
// timeout too short to rely on, leave no connection for reuse: each
// request gets a new one and the server sees no request after its close.
func TestConnectionCloseHonoured(t *testing.T) {
	cases := []struct {
		name, reqHeader, respHeader string
	}{
		{"request", "Connection: close\r\n", ""},
		{"response-tokens", "", "Connection: keep-alive, Close\r\n"},
		{"keepalive-timeout", "", "Keep-Alive: timeout=1, max=5\r\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var conns, afterClose atomic.Int64
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					nc, err := ln.Accept()
					if err != nil {
						return
					}
					conns.Add(1)
					go func() {
						defer nc.Close()
						br := bufio.NewReader(nc)
						for i := 0; ; i++ {
							req, err := http.ReadRequest(br)
							if err != nil {
								return
							}
							_, _ = io.Copy(io.Discard, req.Body)
							if i > 0 {
								afterClose.Add(1)
							}
							_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\n"+c.respHeader+"Transfer-Encoding: chunked\r\n\r\n"+
								sseChunk(`{"choices":[{"text":" a"}]}`)+sseChunk(`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)+
								sseChunk("[DONE]")+"0\r\n\r\n")
						}
					}()
				}
			}()
			url := "http://" + ln.Addr().String() + "/v1/completions"
			cl := newClient(nil, []string{url}, &clock{start: time.Now()}, 10*time.Second, &memBudget{limit: DefaultStreamMemory})
			defer cl.close()
			for i := range 3 {
				j := &job{id: i, output: 1, target: 0}
				head := "User-Agent: mbench\r\n" + c.reqHeader + "Content-Length: 2\r\n\r\n"
				j.closeConn = headCloses([]byte(head))
				j.wire = []byte(head + "{}")
				var rec Record
				release := cl.do(context.Background(), 0, j, &rec, nil)
				if release != nil {
					release()
				}
				if !rec.OK() {
					t.Fatalf("request %d: %s", i, rec.Error)
				}
			}
			if got := conns.Load(); got != 3 {
				t.Errorf("%d connections for 3 requests, want 3 (one each)", got)
			}
			if afterClose.Load() != 0 {
				t.Errorf("%d requests written on a connection after its Connection: close", afterClose.Load())
			}
		})
	}
}

// TestHeaderTokens: the Connection and Keep-Alive values the client reads.
func TestHeaderTokens(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{{"close", true}, {"Close", true}, {"keep-alive, close", true}, {" close ,x", true}, {"keep-alive", false}, {"closed", false}, {"", false}} {
		if got := hasToken([]byte(c.v), "close"); got != c.want {
			t.Errorf("hasToken(%q) = %v, want %v", c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		v    string
		want time.Duration
	}{{"timeout=5, max=100", 4 * time.Second}, {"max=3, timeout=2", time.Second}, {"timeout=1", 0}, {"timeout=60", h1IdleMax}, {"max=9", h1IdleMax}, {"timeout=x", h1IdleMax}} {
		if got := keepAliveIdle([]byte(c.v)); got != c.want {
			t.Errorf("keepAliveIdle(%q) = %v, want %v", c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		h    string
		want bool
	}{{"A: b\r\nConnection: close\r\n\r\n", true}, {"connection:keep-alive, close\r\n\r\n", true}, {"A: b\r\n\r\nConnection: close\r\n", false}, {"X-Connection: close\r\n\r\n", false}} {
		if got := headCloses([]byte(c.h)); got != c.want {
			t.Errorf("headCloses(%q) = %v, want %v", c.h, got, c.want)
		}
	}
}

// TestIdleCloseNoticed: llama-server's close after a streamed response
// reaches an idle pooled connection before the next request; the client
// notices it (the reactor from epoll's RDHUP, the goroutine path with a
// non-blocking peek) and the next request goes on a new connection: it is
// not written into the closed one (the server drains nothing) and not sent
// twice.
func TestIdleCloseNoticed(t *testing.T) {
	for _, io := range []string{"reactor", "goroutines"} {
		t.Run(io, func(t *testing.T) {
			cs := startClosingServer(t, &closingServer{tokens: 2})
			cl := newClient(nil, []string{cs.url + "/v1/completions"}, &clock{start: time.Now()}, 10*time.Second, &memBudget{limit: DefaultStreamMemory})
			defer cl.close()
			run := func(fn func()) { fn() }
			if io == "reactor" {
				aps, ok := cl.reactorAddrs()
				re, err := newReactor()
				if !ok || err != nil {
					t.Fatalf("reactor: %v %v", ok, err)
				}
				defer re.close()
				cl.useReactor(re, aps)
				run = func(fn func()) {
					done := make(chan struct{})
					re.submit(func() { fn(); close(done) })
					<-done
				}
			}
			p := cl.pools[0]
			for i := range 3 {
				head := "User-Agent: mbench\r\nX-Request-Id: idle-" + fmt.Sprint(i) + "\r\nContent-Length: 2\r\n\r\n"
				j := &job{id: i, output: 2, target: 0, wire: []byte(head + "{}")}
				var rec Record
				run(func() {
					if release := cl.do(context.Background(), 0, j, &rec, nil); release != nil {
						release()
					}
				})
				if !rec.OK() || rec.Resent {
					t.Fatalf("request %d: %s %q, resent %v", i, rec.Status, rec.Error, rec.Resent)
				}
				// Wait for the event itself: the server's FIN seen on the
				// idle connection.
				deadline := time.Now().Add(10 * time.Second)
				for {
					p.mu.Lock()
					var c *h1Conn
					if len(p.idle) > 0 {
						c = p.idle[len(p.idle)-1]
					}
					p.mu.Unlock()
					if c == nil || peerClosed(c.nc) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("after request %d: the client never saw the server close the idle connection", i)
					}
					time.Sleep(time.Millisecond)
				}
			}
			cs.mu.Lock()
			defer cs.mu.Unlock()
			if cs.drained.Load() != 0 || cs.conns.Load() != 3 {
				t.Errorf("%d bytes written into closed connections, %d connections for 3 requests", cs.drained.Load(), cs.conns.Load())
			}
			for id, n := range cs.handled {
				if n != 1 {
					t.Errorf("%s handled %d times", id, n)
				}
			}
		})
	}
}

// TestAchievedRateCountsAcknowledged: a server that takes one request at a
// time, 5 ms each (at most 200 req/s), offered 600 req/s. The kernel
// completes every connect and buffers every request, so the client's sends
// keep up with the schedule; achieved_rate must count what the server
// acknowledged (response heads) in the window, which matches the server's
// own count of heads it wrote in that window, far below the sends beside it.
func TestAchievedRateCountsAcknowledged(t *testing.T) {
	for _, path := range []string{"reactor", "goroutines"} {
		t.Run(path, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var heads []time.Time
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					req, err := http.ReadRequest(bufio.NewReader(c))
					if err == nil {
						_, _ = io.Copy(io.Discard, req.Body)
						time.Sleep(5 * time.Millisecond)
						mu.Lock()
						heads = append(heads, time.Now())
						mu.Unlock()
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"+
							sseChunk(`{"choices":[{"text":" a"}]}`)+sseChunk(`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)+
							sseChunk("[DONE]")+"0\r\n\r\n")
					}
					_ = c.Close()
				}
			}()
			defer func() { ln.Close(); <-done }()
			_, res := runIO(t, Config{Targets: []string{"http://" + ln.Addr().String()}, Model: "m", Rate: 600, Shape: Shape{Input: 8, Output: 1},
				Duration: 500 * time.Millisecond, Seed: 5, DrainTimeout: 30 * time.Second}, path)
			g := res.Grade
			first, last := int64(1<<62), int64(0)
			for _, r := range res.Records {
				if r.Phase == PhaseMeasure {
					first, last = min(first, r.ScheduledNs), max(last, r.ScheduledNs)
				}
			}
			lo, hi := res.Start.Add(time.Duration(first)), res.Start.Add(time.Duration(last)+time.Duration(ClientLateMs*1e6))
			mu.Lock()
			seen := 0
			for _, h := range heads {
				if !h.Before(lo) && !h.After(hi) {
					seen++
				}
			}
			mu.Unlock()
			span := hi.Sub(lo).Seconds()
			server := float64(seen) / span
			t.Logf("offered 600 req/s: sent %.0f req/s, acknowledged %.0f req/s; the server wrote %.0f heads/s in the window", g.SentRate, g.AchievedRate, server)
			if math.Abs(g.AchievedRate-server)*span > 3+0.05*float64(seen) {
				t.Errorf("achieved_rate %.0f req/s, the server's heads %.0f req/s", g.AchievedRate, server)
			}
			if g.SentRate < 2*g.AchievedRate || server > 220 {
				t.Errorf("sent %.0f req/s, acknowledged %.0f, server %.0f: the server's limit does not show", g.SentRate, g.AchievedRate, server)
			}
		})
	}
}
