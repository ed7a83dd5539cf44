// Package stub is an in-process, vLLM-like streaming completion server for
// tests and load-generator benchmarks. It streams a configurable number of
// tokens with a known first-token delay and inter-token gap, injects HTTP and
// stream faults on demand, and logs server-side ground truth for every
// request: its arrival, its first flush and its end, plus concurrency per
// session. It listens on 127.0.0.1 only.
package stub

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Server.
type Options struct {
	Model      string        // model id served ("stub-model" when empty)
	FirstToken time.Duration // arrival to first content chunk
	Gap        time.Duration // between content chunks
	Tokens     int           // content chunks per request; 0 = the request's max_tokens
	// Precise waits by sleeping to 1.5 ms before each deadline and then
	// spinning, so delays are accurate to a few µs (time.Sleep alone can be
	// ~1 ms late). It costs CPU; use it for accuracy tests, not load.
	Precise bool
	// Burst flushes only the first content chunk on its own and writes the
	// rest of the stream (remaining chunks, usage, [DONE]) with one flush at
	// the end, as a busy server coalescing its output would. It needs Gap 0.
	// It spares the CPU in load benchmarks where the stub shares the machine
	// with the client; the first flush, the TTFT ground truth, is unchanged.
	Burst bool
	// RecordPrompts keeps every request's prompt token ids in its Entry.
	RecordPrompts bool
	// CPUs pins a stub process (ServeProcess) to these CPUs, with as many
	// Ps (GOMAXPROCS); an in-process stub ignores it.
	CPUs []int `json:",omitempty"`
	// RecordRequests keeps every request's body and headers in its Entry.
	RecordRequests bool
	// APIKey, when set, refuses /v1 requests without "Authorization: Bearer
	// APIKey" with 401 {"error":"Unauthorized"}, as vLLM's
	// AuthenticationMiddleware does (vllm/entrypoints/openai/server_utils.py:38-83
	// at vLLM commit b36adfa3, in 0.18.1).
	APIKey string
	// Fault, when set, picks the fault for each request; n counts requests
	// from 0 in arrival order and id is the X-Mbench-Id header.
	Fault func(n int64, id string) Fault `json:"-"`

	control bool // serve /stub/log and /stub/reset (ServeProcess)
}

// Fault is a misbehaviour injected into one response.
type Fault struct {
	Status      int    // reply with this HTTP status and Body instead of a stream (0 = stream)
	Body        string // body of a Status reply
	Break       bool   // cut the connection after BreakAfter content chunks
	BreakAfter  int
	StreamError string // after the content chunks, send an in-stream error with this message
	NoUsage     bool   // omit the usage chunk
	Malformed   bool   // after the content chunks, send a chunk that is not JSON
	Hang        bool   // send nothing (not even headers) until the client goes away
	// Empty makes every chunk carry empty text (delta.content "") and the
	// usage chunk count 0 tokens (unless Usage says otherwise): an engine
	// that produced nothing.
	Empty bool
	// EOSAt > 0 ends a completions stream the way llama.cpp's llama-server
	// ends one at end of generation (tools/server/server-context.cpp:1833-1877
	// and server-task.cpp:374-410 at 80fb11ac): the EOSAt-th token (at
	// most the tokens asked for) is the end-of-generation token, streamed as
	// a chunk with empty text at its due time, followed at once by the final
	// chunk — empty text, finish_reason "stop", and the usage (completion
	// tokens counting the end-of-generation token) in the same chunk.
	// EOSAt = 1 is the one-token answer: no content at all.
	EOSAt int
	// Usage, when set, is the usage chunk's completion_tokens given the
	// chunks sent (nil: the chunks sent).
	Usage func(chunks int) int `json:"-"`
}

// Entry is the server-side ground truth of one request.
type Entry struct {
	ID, Session string    // X-Mbench-Id and X-Mbench-Session headers
	RequestID   string    // X-Request-Id header, which vLLM takes as the request's id
	Arrival     time.Time // handler entry
	FirstFlush  time.Time // just before the first content chunk was flushed (zero if none)
	Done        time.Time // just before [DONE] is written, or handler exit
	Model       string    // model named in the request
	MaxTokens   int
	Chunks      int     // content chunks sent
	Status      int     // HTTP status sent
	Prompt      []int32 // with Options.RecordPrompts
	Body        string  // with Options.RecordRequests: the request body as sent
	Header      http.Header
}

// TTFT is the server's own time to first token: first flush minus arrival.
func (e Entry) TTFT() time.Duration {
	if e.FirstFlush.IsZero() {
		return 0
	}
	return e.FirstFlush.Sub(e.Arrival)
}

// Server is a running stub.
type Server struct {
	URL  string // base URL, http://127.0.0.1:PORT
	opts Options
	srv  *http.Server
	seq  atomic.Int64

	mu          sync.Mutex
	entries     []Entry
	inflight    int
	maxInflight int
	sessions    map[string]int // requests in flight per session
	maxPerSess  map[string]int
	maxActive   int // most sessions with a request in flight at once
}

// Start listens on 127.0.0.1:0 and serves /health, /v1/models and streaming
// /v1/completions until Close.
func Start(opts Options) (*Server, error) {
	opts.Model = cmp.Or(opts.Model, "stub-model")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), opts: opts, sessions: map[string]int{}, maxPerSess: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":` + strconv.Quote(opts.Model) + `,"object":"model"}]}`))
	})
	mux.HandleFunc("POST /v1/completions", s.complete)
	mux.HandleFunc("POST /v1/chat/completions", s.complete)
	if opts.control {
		mux.HandleFunc("GET /stub/log", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(s.Entries())
		})
		mux.HandleFunc("POST /stub/reset", func(w http.ResponseWriter, _ *http.Request) { s.Reset() })
	}
	// Accept errors (e.g. out of file descriptors when a client floods it)
	// are the client's story, told by its records; keep them off stderr.
	var h http.Handler = mux
	if opts.APIKey != "" {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			if strings.HasPrefix(r.URL.Path, "/v1") && r.Method != http.MethodOptions && (!strings.EqualFold(scheme, "bearer") || key != opts.APIKey) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"error":"Unauthorized"}`))
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server and its connections.
func (s *Server) Close() error { return s.srv.Close() }

// Entries returns a copy of the log, in order of completion.
func (s *Server) Entries() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Entry(nil), s.entries...)
}

// Reset clears the log and the concurrency maxima.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries, s.maxInflight, s.maxActive = nil, s.inflight, 0
	s.maxPerSess = map[string]int{}
}

// MaxInflight is the most requests in flight at once.
func (s *Server) MaxInflight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxInflight
}

// Sessions returns the most requests in flight at once per session, and the
// most sessions with a request in flight at once.
func (s *Server) Sessions() (perSession map[string]int, maxActive int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.maxPerSess), s.maxActive
}

type completionRequest struct {
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens int             `json:"max_tokens"`
	Stream    bool            `json:"stream"`
	Messages  []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"` // chat
}

func (s *Server) enter(sess string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight++
	s.maxInflight = max(s.maxInflight, s.inflight)
	if sess == "" {
		return
	}
	s.sessions[sess]++
	s.maxPerSess[sess] = max(s.maxPerSess[sess], s.sessions[sess])
	s.maxActive = max(s.maxActive, len(s.sessions))
}

func (s *Server) leave(e *Entry) {
	e.Done = time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if e.Session != "" {
		if s.sessions[e.Session]--; s.sessions[e.Session] == 0 {
			delete(s.sessions, e.Session)
		}
	}
	s.entries = append(s.entries, *e)
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	e := Entry{Arrival: time.Now(), ID: r.Header.Get("X-Mbench-Id"), RequestID: r.Header.Get("X-Request-Id"), Session: r.Header.Get("X-Mbench-Session")}
	n := s.seq.Add(1) - 1
	s.enter(e.Session)
	left := false
	defer func() {
		if !left {
			s.leave(&e)
		}
	}()
	req, err := s.decode(r, &e)
	if err != nil {
		e.Status = http.StatusBadRequest
		http.Error(w, `{"object":"error","message":"bad request: `+err.Error()+`"}`, e.Status)
		return
	}
	var f Fault
	if s.opts.Fault != nil {
		f = s.opts.Fault(n, e.ID)
	}
	if f.Hang {
		<-r.Context().Done()
		return
	}
	if f.Status != 0 {
		e.Status = f.Status
		w.WriteHeader(f.Status)
		_, _ = w.Write([]byte(f.Body))
		return
	}
	e.Status = http.StatusOK
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	sw := newStreamWire(r.URL.Path == "/v1/chat/completions", n, s.opts.Model, f.Empty)
	if !s.stream(r.Context(), w, &e, sw, f, req) {
		return
	}
	if f.Break {
		panic(http.ErrAbortHandler)
	}
	if f.Malformed {
		_, _ = w.Write([]byte("data: {\"choices\": [oops\n\n"))
	}
	if f.StreamError != "" {
		msg, _ := json.Marshal(f.StreamError)
		_, _ = w.Write([]byte(`data: {"error":{"object":"error","message":` + string(msg) + `,"type":"InternalServerError","code":500}}` + "\n\n"))
	}
	if !f.NoUsage && f.StreamError == "" && !sw.eos(f) {
		out := e.Chunks
		if f.Empty {
			out = 0
		}
		if f.Usage != nil {
			out = f.Usage(e.Chunks)
		}
		_, _ = w.Write([]byte(sw.meta + `,"choices":[],"usage":{"prompt_tokens":` + strconv.Itoa(req.promptTokens(sw.chat)) +
			`,"total_tokens":0,"completion_tokens":` + strconv.Itoa(out) + `}}` + "\n\n"))
	}
	// Logged before [DONE] goes out: a client may finish, and read the
	// log, as soon as it sees [DONE].
	left = true
	s.leave(&e)
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	w.(http.Flusher).Flush()
}

// decode reads the request into req and e (with the prompt or the whole
// request when Options ask for them).
func (s *Server) decode(r *http.Request, e *Entry) (req completionRequest, err error) {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if s.opts.RecordRequests {
		e.Body, e.Header = string(body), r.Header.Clone()
	}
	if err != nil {
		return req, err
	}
	e.MaxTokens, e.Model = req.MaxTokens, req.Model
	if s.opts.RecordPrompts {
		_ = json.Unmarshal(req.Prompt, &e.Prompt)
	}
	return req, nil
}

// promptTokens is the usage's prompt_tokens: a completion's token ids, a
// chat's words.
func (req *completionRequest) promptTokens(chat bool) int {
	if !chat {
		return promptLen(req.Prompt)
	}
	words := 0
	for _, m := range req.Messages {
		words += len(strings.Fields(m.Content))
	}
	return words
}

// streamWire is how a response's chunks read on the wire: vLLM's
// text_completion chunks, or for chat its chat.completion.chunk — a role
// chunk with empty content, sent with the first token, then delta.content
// chunks.
type streamWire struct {
	chat   bool
	meta   string // a chunk up to its choices
	prefix string // a chunk up to its choice's fields
	head   []byte // a token's chunk up to its finish_reason's value
	tail   string // a token's chunk after it
}

func newStreamWire(chat bool, n int64, model string, empty bool) *streamWire {
	id, object, tail := `"cmpl-stub-`+strconv.FormatInt(n, 10)+`"`, "text_completion", ",\"stop_reason\":null}],\"usage\":null}\n\n"
	text := `" tok"`
	if empty {
		text = `""`
	}
	token := `"text":` + text
	if chat {
		id, object, tail, token = `"chatcmpl-stub-`+strconv.FormatInt(n, 10)+`"`, "chat.completion.chunk", "}]}\n\n", `"delta":{"content":`+text+`}`
	}
	sw := &streamWire{chat: chat, tail: tail, meta: `data: {"id":` + id + `,"object":"` + object + `","created":0,"model":` + strconv.Quote(model)}
	sw.prefix = sw.meta + `,"choices":[{"index":0,`
	sw.head = []byte(sw.prefix + token + `,"logprobs":null,"finish_reason":`)
	return sw
}

// eos reports whether the stream ends as llama-server's does (Fault.EOSAt).
func (sw *streamWire) eos(f Fault) bool { return f.EOSAt > 0 && !sw.chat }

// stream sends the response's token chunks at their due times, from
// FirstToken after arrival then every Gap, and counts them in e; false:
// the client went away.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, e *Entry, sw *streamWire, f Fault, req completionRequest) bool {
	tokens := s.opts.Tokens
	if tokens <= 0 {
		tokens = max(req.MaxTokens, 1)
	}
	eos := sw.eos(f)
	if eos {
		tokens = min(tokens, f.EOSAt)
	}
	buf := make([]byte, 0, 2*len(sw.head)+64)
	due := e.Arrival.Add(s.opts.FirstToken)
	for k := range tokens {
		if k > 0 {
			due = due.Add(s.opts.Gap)
		}
		if !s.waitUntil(ctx, due) {
			return false
		}
		if f.Break && k == f.BreakAfter {
			panic(http.ErrAbortHandler)
		}
		buf = buf[:0]
		if sw.chat && k == 0 {
			buf = append(buf, sw.prefix+`"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
		}
		if eos && k == tokens-1 {
			buf = append(buf, sw.prefix+`"text":"","logprobs":null,"finish_reason":null}]}`+"\n\n"...)
			buf = append(buf, sw.prefix+`"text":"","logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":`+
				strconv.Itoa(promptLen(req.Prompt))+`,"total_tokens":0,"completion_tokens":`+strconv.Itoa(tokens)+`}}`+"\n\n"...)
		} else {
			buf = append(buf, sw.head...)
			if k == tokens-1 {
				buf = append(buf, `"length"`...)
			} else {
				buf = append(buf, `null`...)
			}
			buf = append(buf, sw.tail...)
		}
		if _, err := w.Write(buf); err != nil {
			return false
		}
		if k == 0 {
			// Stamped before the flush hands the chunk to the kernel: no
			// client can see the first token before this time.
			e.FirstFlush = time.Now()
		}
		if k == 0 || !s.opts.Burst || s.opts.Gap > 0 {
			w.(http.Flusher).Flush()
		}
		e.Chunks++
	}
	return true
}

// promptLen counts the ids of a token-id prompt (0 for a text prompt).
func promptLen(raw json.RawMessage) int {
	if len(raw) == 0 || raw[0] != '[' {
		return 0
	}
	n := bytes.Count(raw, []byte{','})
	if len(raw) > 2 {
		n++
	}
	return n
}

// waitUntil waits until t; false when the client went away.
func (s *Server) waitUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if s.opts.Precise {
		d -= 1500 * time.Microsecond
	}
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return false
		}
	}
	if s.opts.Precise {
		// Busy-wait: a Gosched loop would keep this P from polling the
		// network, delaying the very reads and writes being timed.
		for time.Until(t) > 0 {
		}
	}
	return !errors.Is(ctx.Err(), context.Canceled)
}
