package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxBody bounds a request body the router reads (a 200k-token prompt of
// token ids is about 1.4 MB).
const maxBody = 64 << 20

// Server is the router's HTTP front: OpenAI completion and chat-completion
// requests are routed, everything else goes to the first serving instance.
type Server struct {
	r      *Router
	opt    ServerOptions
	client *http.Client
	log    *Log
	boot   map[int]*bootstrap // Mooncake: bootstrap servers by instance

	recomputeNoted sync.Map // instance → struct{}: its first prefill without KV was reported
}

// noteRecompute says, once per instance, that a nixl prefill sent no KV.
func (s *Server) noteRecompute(i int) {
	if _, seen := s.recomputeNoted.LoadOrStore(i, struct{}{}); !seen {
		fmt.Fprintf(s.opt.Messages, "router: prefill on %s answered no kv_transfer_params: its decode computes the prompt itself, as vLLM's toy proxy does "+
			"(a prefill whose one token is EOS sends no KV; if every request does this, is a KV connector configured? "+
			"a MooncakeConnector of vLLM 0.18 answers none: route with --kv-protocol mooncake); each such request is logged recompute\n", s.r.URL(i))
	}
}

// NewServer serves r's decisions, logging each request to log, splitting
// requests between instances by o.Protocol.
func NewServer(r *Router, log *Log, o ServerOptions) (*Server, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{r: r, opt: o, log: log, client: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}}
	if err := s.setupBootstrap(); err != nil {
		return nil, err
	}
	return s, nil
}

// Handler returns the router's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, req *http.Request) {
		s.handleCompletion(w, req, endpointCompletions)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, req *http.Request) {
		s.handleCompletion(w, req, endpointChat)
	})
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /breakdown", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.log.Breakdown(s.r)) // the client went away: nothing to do
	})
	mux.HandleFunc("GET /routes", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		s.log.WriteEntries(w)
	})
	mux.HandleFunc("DELETE /routes", func(w http.ResponseWriter, _ *http.Request) { s.log.Reset() })
	mux.HandleFunc("/", s.passThrough)
	return mux
}

// handleHealth is 200 only when every instance's /health is (and, with
// the Mooncake protocol, every producer's bootstrap server answered).
func (s *Server) handleHealth(w http.ResponseWriter, req *http.Request) {
	if err := s.bootstrapReady(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
	defer cancel()
	for _, in := range s.r.inst {
		hr, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.url+"/health", nil)
		resp, err := s.client.Do(hr)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			http.Error(w, in.url+" not healthy", http.StatusServiceUnavailable)
			return
		}
	}
}

// passThrough forwards any other request to the first serving instance.
func (s *Server) passThrough(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.forward(req.Context(), s.r.inst[s.r.serve[0]].url+req.URL.RequestURI(), req.Method, req.Header, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if err := copyResponse(w, resp, nil); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
	}
}

// Routed endpoints: a request's prefill leg goes to the same path as the
// request.
const (
	endpointCompletions = "/v1/completions"
	endpointChat        = "/v1/chat/completions"
)

// handleCompletion routes one request to a routed endpoint.
func (s *Server) handleCompletion(w http.ResponseWriter, req *http.Request, endpoint string) {
	start := time.Now()
	body, fields, prompt, err := readRouted(w, req, endpoint)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.bootstrapReady(); err != nil { // as vLLM's Mooncake proxy, 503 until every producer is known
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	d := s.r.Decide(req.Header.Get("X-Mbench-Session"), prompt)
	e := s.log.start(s.r, d, req.Header, start)
	defer func() {
		s.r.Finish(d)
		e.DoneMs = msSince(start)
		s.log.finish(e)
	}()
	ctx := req.Context()
	if d.Prefill != d.Decode && s.opt.Protocol == ProtocolMooncake {
		s.serveMooncake(w, req, d, e, endpoint, fields, start)
		return
	}
	if d.Prefill != d.Decode {
		if body, err = s.prefillNixl(ctx, req, d, e, endpoint, fields, start); err != nil {
			http.Error(w, err.Error(), e.Status)
			return
		}
	}
	e.DecodeSentMs = msSince(start)
	resp, err := s.forward(ctx, s.r.URL(d.Decode)+endpoint, http.MethodPost, req.Header, body)
	if err != nil {
		e.Status, e.Error = http.StatusBadGateway, err.Error()
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	e.Status = resp.StatusCode
	tail := &tailBuffer{max: 64 << 10}
	resp.Body = readCloser{io.TeeReader(resp.Body, tail), resp.Body}
	if err := copyResponse(w, resp, func() {
		s.r.PrefillDone(d) // the first bytes of the answer: the prefill is over
		e.FirstByteMs = msSince(start)
	}); err != nil {
		e.Status, e.Error = http.StatusBadGateway, "router: decode on "+s.r.URL(d.Decode)+": "+err.Error()
		http.Error(w, e.Error, http.StatusBadGateway)
		return
	}
	e.EngineCachedTokens = tail.cachedTokens()
}

// readRouted reads a routed request's body: its fields and the tokens of
// its prompt (or its chat's messages).
func readRouted(w http.ResponseWriter, req *http.Request, endpoint string) (body []byte, fields map[string]json.RawMessage, prompt []int64, err error) {
	if body, err = io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody)); err != nil {
		return nil, nil, nil, err
	}
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, nil, nil, fmt.Errorf("router: body is not a JSON object: %w", err)
	}
	field, tokens := "prompt", promptTokens
	if endpoint == endpointChat {
		field, tokens = "messages", chatTokens
	}
	if prompt, err = tokens(fields[field]); err != nil {
		return nil, nil, nil, fmt.Errorf("router: %s: %w", field, err)
	}
	return body, fields, prompt, nil
}

// prefillNixl runs the prefill leg of a NIXL-disaggregated request and
// returns the decode leg's body: fields with the prefill's
// kv_transfer_params. On error e holds the status to answer.
func (s *Server) prefillNixl(ctx context.Context, req *http.Request, d *Decision, e *Entry, endpoint string, fields map[string]json.RawMessage, start time.Time) ([]byte, error) {
	params, status, err := s.nixlPrefill(ctx, s.r.URL(d.Prefill)+endpoint, req.Header, fields)
	s.r.PrefillDone(d)
	e.PrefillMs, e.PrefillStatus = msSince(start), status
	if err != nil {
		e.Status, e.Error = status, err.Error()
		return nil, err
	}
	if params == nil { // no KV sent: the decode computes the prompt, as the toy proxy's does
		e.Recompute = true
		s.noteRecompute(d.Prefill)
	} else {
		fields["kv_transfer_params"] = params
	}
	body, err := json.Marshal(fields)
	if err != nil {
		e.Status, e.Error = http.StatusInternalServerError, err.Error()
	}
	return body, err
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

// tailBuffer keeps the last max bytes written to it: the end of an answer,
// where its usage is.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// cachedTokens is the engine's usage.prompt_tokens_details.cached_tokens in
// the answer's tail (vLLM reports it with --enable-prompt-tokens-details),
// or nil.
func (t *tailBuffer) cachedTokens() *int {
	const key = `"cached_tokens":`
	i := bytes.LastIndex(t.b, []byte(key))
	if i < 0 {
		return nil
	}
	rest := bytes.TrimLeft(t.b[i+len(key):], " ")
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	v, err := strconv.Atoi(string(rest[:n]))
	if err != nil {
		return nil
	}
	return &v
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

// forward sends one request upstream with the client's relevant headers.
func (s *Server) forward(ctx context.Context, url, method string, h http.Header, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Length", "Connection", "Accept-Encoding", "Keep-Alive", "Transfer-Encoding", "Te", "Upgrade":
		default:
			req.Header[k] = v
		}
	}
	return s.client.Do(req)
}

// errNoBytes is copyResponse's error when the body failed before its first
// bytes: nothing was written, so the caller can still answer an error.
var errNoBytes = errors.New("the answer ended before its first bytes")

// copyResponse streams resp to w, flushing each read (SSE chunks pass as
// they come), and calls first once when the first body bytes arrive. The
// status and headers go out with the first bytes (or the body's clean end),
// so a body that fails before any byte returns errNoBytes (wrapping the
// read error) with nothing written.
func copyResponse(w http.ResponseWriter, resp *http.Response, first func()) error {
	buf := make([]byte, 32<<10)
	n, err := resp.Body.Read(buf)
	for n == 0 && err == nil {
		n, err = resp.Body.Read(buf)
	}
	if n == 0 && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %w", errNoBytes, err)
	}
	for k, v := range resp.Header {
		if k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	if n > 0 && first != nil {
		first()
	}
	for {
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil // the client went away
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			return nil
		}
		n, err = resp.Body.Read(buf)
	}
}

// promptTokens reads a completion prompt: token ids, a one-element batch of
// them, or text (one token per whitespace-separated word, hashed — enough to
// tell equal prefixes apart).
func promptTokens(raw json.RawMessage) ([]int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, errors.New("missing")
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err == nil {
		return ids, nil
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(raw, &batch); err == nil {
		if len(batch) != 1 {
			return nil, fmt.Errorf("the router takes one prompt per request, got a batch of %d", len(batch))
		}
		return promptTokens(batch[0])
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return nil, errors.New("must be a string or a list of token ids")
	}
	words := strings.Fields(text)
	out := make([]int64, len(words))
	for i, w := range words {
		h := fnv.New64a()
		h.Write([]byte(w))
		out[i] = int64(h.Sum64() >> 1)
	}
	return out, nil
}

// chatTokens reads a chat request's messages as one text, each message's
// role then its content (a string, or the text parts of a list of parts),
// tokenized as promptTokens tokenizes text: equal conversations give equal
// tokens, and a conversation that grows by a turn extends its prefix.
func chatTokens(raw json.RawMessage) ([]int64, error) {
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &msgs); err != nil || len(msgs) == 0 {
		return nil, errors.New("must be a non-empty list of {role, content}")
	}
	var b strings.Builder
	for i, m := range msgs {
		b.WriteString(m.Role)
		b.WriteByte(' ')
		var text string
		if err := json.Unmarshal(m.Content, &text); err == nil {
			b.WriteString(text)
		} else {
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(m.Content, &parts); err != nil {
				return nil, fmt.Errorf("[%d].content: must be a string or a list of parts", i)
			}
			for _, p := range parts {
				b.WriteString(p.Text)
				b.WriteByte(' ')
			}
		}
		b.WriteByte('\n')
	}
	text, _ := json.Marshal(b.String())
	return promptTokens(text)
}

// Serve serves the router on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler()}
	dctx, stop := context.WithCancel(ctx)
	defer stop()
	s.discoverBootstrap(dctx)
	s.pollEngines(dctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("router: %w", err)
	}
	return nil
}
