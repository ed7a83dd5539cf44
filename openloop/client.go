package openloop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

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
	body    []byte
	header  http.Header
	input   int
	output  int
	group   int
	session string
	turn    int
	traceNs int64
}

// prepare encodes j's body for the prompt toks (j.output tokens asked for)
// and its headers, ahead of its send time, so that sending j formats nothing.
// It returns j.
func (r *runner) prepare(j *job, toks []int32) *job {
	j.input = len(toks)
	j.body = appendCompletionBody(make([]byte, 0, bodySize(r.model, len(toks))), r.model, toks, j.output)
	j.header = http.Header{"Content-Type": hdrJSON, "Accept": hdrSSE, "X-Mbench-Id": {strconv.Itoa(j.id)}}
	if j.session != "" {
		j.header["X-Mbench-Session"] = []string{j.session}
	}
	return j
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

// client sends completion requests and measures their streams.
type client struct {
	hc  *http.Client
	clk *clock
}

// scratch is the per-request parsing state, pooled so the steady state
// allocates nothing per chunk (and little per request).
type scratch struct {
	sse *sseReader
	st  streamState
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{sse: newSSEReader(nil), st: streamState{times: make([]int64, 0, 256)}}
}}

// do sends j to url and fills rec (whose identity fields are already set):
// times, tokens, status. onFirst, if not nil, runs at the first content chunk.
// The returned function, when not nil, reads the response to its end (so the
// connection is reused) and releases it; call it after recording rec.
func (c *client) do(ctx context.Context, url string, j *job, rec *Record, onFirst func()) (release func()) {
	fail := func(class ErrorClass, msg string) {
		rec.DoneNs = c.clk.now()
		rec.Status, rec.Error, rec.ErrorClass = StatusError, msg, class
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(j.body))
	if err != nil {
		rec.SentNs = c.clk.now()
		fail(ErrClassOther, err.Error())
		return nil
	}
	req.Header = j.header // this request's own map, built by prepare
	rec.SentNs = c.clk.now()
	resp, err := c.hc.Do(req)
	if err != nil {
		fail(ClassifyErr(ctx, err), errText(ctx, err))
		return nil
	}
	rec.HTTPStatus = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		body := strings.TrimSpace(string(excerpt))
		fail(ClassifyHTTP(resp.StatusCode, body), fmt.Sprintf("HTTP %d: %s", resp.StatusCode, body))
		return func() {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
	}
	sc := scratchPool.Get().(*scratch)
	sc.sse.reset(resp.Body)
	sc.st.reset()
	if cap(sc.st.times) < j.output+1 {
		sc.st.times = make([]int64, 0, j.output+1)
	}
	sc.st.onFirst = onFirst
	err = sc.st.consume(sc.sse, c.clk.now)
	rec.DoneNs = c.clk.now()
	st := &sc.st
	rec.FirstTokenNs, rec.LastTokenNs = st.firstNs, st.lastNs
	rec.ITLMs = st.itlMs()
	rec.OutputTokens = st.chunks
	if st.haveUsage {
		rec.OutputTokens = st.usageOut
	} else {
		rec.UsageMissing = true
	}
	rec.Status = StatusOK
	if err != nil {
		rec.Status, rec.Error, rec.ErrorClass = StatusError, errText(ctx, err), ClassifyErr(ctx, err)
	}
	return func() {
		if err == nil { // after [DONE]: read to the end so the connection is reused
			_, _ = io.Copy(io.Discard, io.LimitReader(sc.sse.br, 64<<10))
		}
		resp.Body.Close()
		sc.sse.reset(nil)
		sc.st.onFirst = nil
		scratchPool.Put(sc)
	}
}

// errText is the record's error text for err: the cause when the request
// was cancelled by the run, the error itself otherwise.
func errText(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		var sc *stopCause
		if errors.As(context.Cause(ctx), &sc) {
			return sc.msg
		}
		return "canceled: " + context.Cause(ctx).Error()
	}
	return err.Error()
}

// fetchModel asks base/v1/models for the served models and returns the
// first id.
func fetchModel(ctx context.Context, hc *http.Client, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", fmt.Errorf("model lookup: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("model lookup: GET %s/v1/models: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("model lookup: GET %s/v1/models: %w", base, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("model lookup: GET %s/v1/models: HTTP %d: %.200s", base, resp.StatusCode, body)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", fmt.Errorf("model lookup: GET %s/v1/models: %w", base, err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("model lookup: GET %s/v1/models: no model listed", base)
	}
	return list.Data[0].ID, nil
}
