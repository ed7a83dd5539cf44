package openloop

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// validHeaderValue reports whether v can be sent as a header value as it
// is: no control character but HTAB (RFC 9110 §5.5).
// It runs on every request's session id in the send path: a byte loop,
// no rune decoding and no closure.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// NewTransport returns the keep-alive transport Run uses by default: direct
// connections (no proxy), no cap on connections per host, idle connections
// kept for reuse, no compression.
func NewTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   1 << 16,
		MaxConnsPerHost:       0,
		IdleConnTimeout:       5 * time.Minute,
		DisableCompression:    true,
		ExpectContinueTimeout: 0,
		WriteBufferSize:       64 << 10,
		ReadBufferSize:        16 << 10,
	}
}

// job is one request ready to send: its prompt and headers are already
// encoded (see prepare).
type job struct {
	id      int
	phase   string
	sched   int64
	body    []byte      // the JSON body (net/http path)
	header  http.Header // net/http path
	wire    []byte      // headers after Host, blank line and body (raw HTTP/1.1 path)
	target  int         // index of the target, -1 until chosen
	pre     *h1Conn     // the connection the dispatcher wrote wire on (preWrite)
	preErr  error       // that write's error
	preOff  int         // the bytes of prefix+wire it wrote
	preSent int64       // when that write ended (0: it did not write all)
	// closeConn: the request's headers say Connection: close, so its
	// connection is not reused after the response.
	closeConn bool
	reqID     string // X-Request-Id
	input     int
	output    int
	group     int
	session   string
	turn      int
	traceNs   int64
	ramp      bool  // sent while the rate ramped up
	queued    int64 // ns it waited for a slot under Arrival.MaxInFlight
	// textPrompt: the prompt went as text, so its token count is the
	// engine's usage.prompt_tokens (input is a word count until then).
	textPrompt bool
}

// prepare encodes j's request for the prompt toks (j.output tokens asked
// for) ahead of its send time, so that sending j formats nothing. It returns
// j. The body is built in *scratch, which the caller keeps from one request
// to the next (as it keeps toks): the request's own buffer is then the one
// allocation of its exact size, where a body built in a fresh buffer was
// allocated, grown and copied for every request.
func (r *runner) prepare(j *job, toks []int32, scratch *[]byte) *job {
	j.input = len(toks)
	if r.cfg.Endpoint == EndpointChat {
		text := string(appendPromptText(make([]byte, 0, 8*len(toks)), toks))
		j.textPrompt = true
		*scratch = appendChatBody((*scratch)[:0], r.model, text, j.output, &r.tail)
	} else {
		*scratch = appendCompletionBody((*scratch)[:0], r.model, toks, j.output, &r.tail)
	}
	return r.encode(j, *scratch)
}

// prepareText is prepare for a text prompt (a dataset's): its input is a
// word count until the engine's usage.prompt_tokens replaces it.
func (r *runner) prepareText(j *job, prompt string, scratch *[]byte) *job {
	j.input, j.textPrompt = len(strings.Fields(prompt)), true
	if r.cfg.Endpoint == EndpointChat {
		*scratch = appendChatBody((*scratch)[:0], r.model, prompt, j.output, &r.tail)
	} else {
		*scratch = appendCompletionTextBody((*scratch)[:0], r.model, prompt, j.output, &r.tail)
	}
	return r.encode(j, *scratch)
}

// encode sets j's headers for body, for the client in use, and returns j.
// body stays the caller's: j keeps the bytes in a buffer of its own.
func (r *runner) encode(j *job, body []byte) *job {
	j.target = -1
	j.reqID = r.reqPrefix + strconv.Itoa(j.id)
	session := j.session
	if !validHeaderValue(session) {
		session = ""
	}
	if !r.cl.raw {
		j.body = bytes.Clone(body)
		j.header = http.Header{"Content-Type": hdrJSON, "Accept": hdrSSE, "X-Request-Id": {j.reqID}, "X-Mbench-Id": {strconv.Itoa(j.id)}}
		if session != "" {
			j.header["X-Mbench-Session"] = []string{session}
		}
		for _, h := range r.headers {
			j.header[h[0]] = []string{h[1]}
		}
		return j
	}
	w := make([]byte, 0, 200+len(j.reqID)+len(session)+len(r.headerWire)+len(body))
	w = append(w, "User-Agent: mbench\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nX-Request-Id: "...)
	w = append(w, j.reqID...)
	w = append(w, "\r\nX-Mbench-Id: "...)
	w = strconv.AppendInt(w, int64(j.id), 10)
	if session != "" {
		w = append(w, "\r\nX-Mbench-Session: "...)
		w = append(w, session...)
	}
	w = append(w, r.headerWire...)
	w = append(w, "\r\nContent-Length: "...)
	w = strconv.AppendInt(w, int64(len(body)), 10)
	w = append(w, "\r\n\r\n"...)
	j.closeConn = headCloses(w)
	j.wire = append(w, body...)
	return j
}

// newRequestIDPrefix is the default Config.RequestIDPrefix: "mbench-", eight
// random hex digits and "-", so that ids are unique across runs against the
// same engine.
func newRequestIDPrefix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "mbench-" + hex.EncodeToString(b[:]) + "-"
}

// stopCause is why in-flight requests were cancelled; it becomes the error
// text of their records.
type stopCause struct{ msg string }

func (e *stopCause) Error() string { return e.msg }

// Causes of cancelled requests.
var (
	causeDrain    = &stopCause{"drain timeout"}
	causeCanceled = &stopCause{"canceled"}
)

// Shared header values (never mutated).
var (
	hdrJSON = []string{"application/json"}
	hdrSSE  = []string{"text/event-stream"}
)

// client sends completion requests and measures their streams: over the raw
// HTTP/1.1 client (pools) when every target is plain http and no
// Config.Client was given, else over net/http (hc).
type client struct {
	hc      *http.Client
	raw     bool
	pools   []*h1Pool // per target, raw only
	urls    []string  // completion URLs, per target
	clk     *clock
	timeout time.Duration // per request, 0 = none
	budget  *memBudget
	// beforeWrite, when set (tests), runs on the request's goroutine just
	// before the request is written.
	beforeWrite func()
}

// newClient sets up the client for the completion URLs.
func newClient(hc *http.Client, urls []string, clk *clock, timeout time.Duration, budget *memBudget) *client {
	c := &client{hc: hc, urls: urls, clk: clk, timeout: timeout, budget: budget}
	if hc != nil {
		return c
	}
	for _, u := range urls {
		pu, err := url.Parse(u)
		if err != nil || pu.Scheme != "http" {
			c.pools = nil
			return c
		}
		addr := pu.Host
		if pu.Port() == "" {
			addr = net.JoinHostPort(pu.Hostname(), "80")
		}
		c.pools = append(c.pools, newH1Pool(addr, pu.Host, pu.RequestURI()))
	}
	c.raw = true
	return c
}

// reactorAddrs resolves every target of the raw client for the reactor (a
// name once, here); false when one does not resolve or is a scoped IPv6
// address, which are left to net.Dialer.
func (c *client) reactorAddrs() ([]netip.AddrPort, bool) {
	if !c.raw {
		return nil, false
	}
	aps := make([]netip.AddrPort, len(c.pools))
	for i, p := range c.pools {
		ta, err := net.ResolveTCPAddr("tcp", p.addr)
		if err != nil || ta.Zone != "" {
			return nil, false
		}
		aps[i] = ta.AddrPort()
	}
	return aps, true
}

// useReactor makes the raw client's connections re's, to the addresses
// reactorAddrs gave.
func (c *client) useReactor(re *reactor, aps []netip.AddrPort) {
	re.clk = c.clk
	for i, p := range c.pools {
		p.re, p.ap = re, aps[i]
	}
}

// close closes the idle connections; a client is not used after close.
func (c *client) close() {
	for _, p := range c.pools {
		p.close()
	}
	if c.hc != nil {
		c.hc.CloseIdleConnections()
	}
}

// scratch is the per-request state, pooled so the steady state allocates
// nothing per chunk (and little per request).
type scratch struct {
	sse *sseReader
	st  streamState
	x   h1Exchange
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{sse: newSSEReader(nil), st: streamState{times: make([]int64, 0, 256)}}
}}

// errRequestTimeout is the cause of a request that ran past
// Config.RequestTimeout.
var errRequestTimeout = errors.New("request timeout")

// do sends j to target t and fills rec (whose identity fields are already
// set): times, tokens, status. rec.SentNs is taken when the request has been
// written. onFirst, if not nil, runs at the first chunk with choices. The
// returned function, when not nil, finishes with the connection (back to the
// pool, or closed) and releases the request's state; call it after recording
// rec.
func (c *client) do(ctx context.Context, t int, j *job, rec *Record, onFirst func()) (release func()) {
	cancel := context.CancelFunc(func() {})
	if c.timeout > 0 {
		ctx, cancel = context.WithTimeoutCause(ctx, c.timeout, errRequestTimeout)
	}
	fail := func(class ErrorClass, msg string) {
		rec.DoneNs = c.clk.now()
		rec.Status, rec.Error, rec.ErrorClass = StatusError, msg, class
	}
	sc := scratchPool.Get().(*scratch)
	done := func() {
		sc.sse.reset(nil, nil)
		sc.st.onFirst = nil
		scratchPool.Put(sc)
		cancel()
	}
	if c.beforeWrite != nil {
		c.beforeWrite()
	}
	var resp response
	var err error
	if c.raw {
		resp, err = c.doRaw(ctx, &sc.x, t, j, rec)
	} else {
		resp, err = c.doHTTP(ctx, c.urls[t], j, func() { rec.SentNs = c.clk.now() })
	}
	if err != nil {
		fail(ClassifyErr(ctx, err), errText(ctx, err))
		done()
		return nil
	}
	rec.HeadNs = max(resp.now(), rec.SentNs)
	rec.HTTPStatus = resp.status
	if resp.status != http.StatusOK {
		excerpt, _ := io.ReadAll(io.LimitReader(resp.body, 200))
		text := strings.TrimSpace(string(excerpt))
		fail(ClassifyHTTP(resp.status, text), fmt.Sprintf("HTTP %d: %s", resp.status, text))
		return func() {
			n, _ := io.Copy(io.Discard, io.LimitReader(resp.body, h1DrainMax))
			resp.finish(n < h1DrainMax)
			done()
		}
	}
	err = c.stream(ctx, sc, resp, j, rec, onFirst)
	return func() {
		if err == nil && !c.raw { // after [DONE]: read to the end so the connection is reused
			_, _ = io.Copy(io.Discard, io.LimitReader(sc.sse.br, h1DrainMax))
		}
		resp.finish(err == nil)
		done()
	}
}

// response is a response's head as either client gives it: finish ends
// the exchange (the connection back to its pool when ok, else closed), and
// now is the clock that stamps the arrivals of its bytes.
type response struct {
	status int
	body   io.Reader
	finish func(ok bool)
	now    func() int64
}

// arrivalClocker is a connection that knows when the bytes last read from
// it arrived (the reactor's, from the kernel's receive times): its clock
// stamps the tokens, on the run's clock; nil when it has none.
type arrivalClocker interface{ arrivalClock() func() int64 }

// doRaw sends j over the built-in HTTP/1.1 client, as exchange x on target
// t's pool, and records when it was written and whether it went again.
func (c *client) doRaw(ctx context.Context, x *h1Exchange, t int, j *job, rec *Record) (response, error) {
	*x = h1Exchange{pool: c.pools[t]}
	if j.preSent != 0 { // the dispatcher wrote it all
		rec.SentNs = j.preSent
	}
	err := x.roundTrip(ctx, j, c.clk.now)
	if x.sentNs != 0 {
		rec.SentNs = x.sentNs
	}
	rec.Resent = x.resent
	if err != nil {
		return response{}, err
	}
	resp := response{status: x.status, body: &x.conn.body, finish: x.release, now: c.clk.now}
	if ac, ok := x.conn.nc.(arrivalClocker); ok && ac.arrivalClock() != nil {
		resp.now = ac.arrivalClock()
	}
	return resp, nil
}

// doHTTP sends j over net/http; sent is called when the request has been
// written (httptrace).
func (c *client) doHTTP(ctx context.Context, url string, j *job, sent func()) (response, error) {
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent() }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(j.body))
	if err != nil {
		return response{}, err
	}
	req.Header = j.header // this request's own map, built by prepare
	resp, err := c.hc.Do(req)
	if err != nil {
		return response{}, err
	}
	return response{resp.StatusCode, resp.Body, func(bool) { resp.Body.Close() }, c.clk.now}, nil
}

// stream reads a 200 response's event stream into rec — the arrivals of
// its chunks, its tokens and usage — and judges it: it returns the
// stream's error (nil: it ended with [DONE]), which fails rec, as does a
// complete stream that check finds wanting.
func (c *client) stream(ctx context.Context, sc *scratch, resp response, j *job, rec *Record, onFirst func()) error {
	st := &sc.st
	sc.sse.reset(resp.body, c.budget)
	st.reset(rec.HeadNs)
	if cap(st.times) < j.output+1 {
		st.times = make([]int64, 0, j.output+1)
	}
	st.onFirst = onFirst
	err := st.consume(sc.sse, resp.now)
	rec.DoneNs = max(resp.now(), st.floorNs)
	rec.FirstTokenNs, rec.LastTokenNs = st.firstNs, st.lastNs
	rec.ITLMs = st.itlMs()
	rec.FinishReason = st.finish
	rec.OutputTokens = st.chunks
	if j.textPrompt && st.havePrompt {
		rec.InputTokens = st.usagePrompt
	}
	if st.haveCached {
		rec.CachedTokens = new(st.usageCached)
	}
	if st.haveUsage {
		rec.OutputTokens = st.usageOut
	} else {
		rec.UsageMissing = true
	}
	rec.Status = StatusOK
	if err != nil {
		rec.Status, rec.Error, rec.ErrorClass = StatusError, errText(ctx, err), ClassifyErr(ctx, err)
	} else if class, why := st.check(j.output); class != "" {
		rec.Status, rec.Error, rec.ErrorClass = StatusError, why, class
	}
	return err
}

// errText is the record's error text for err: the cause when the request
// was cancelled by the run, the error itself otherwise.
func errText(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		if sc, ok := errors.AsType[*stopCause](context.Cause(ctx)); ok {
			return sc.msg
		}
		if errors.Is(context.Cause(ctx), errRequestTimeout) {
			return "request timeout"
		}
		return "canceled: " + context.Cause(ctx).Error()
	}
	return err.Error()
}
