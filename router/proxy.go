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
	client *http.Client
	log    *Log
}

// NewServer serves r's decisions, logging each request to log.
func NewServer(r *Router, log *Log) *Server {
	return &Server{r: r, log: log, client: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}}
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
		writeJSON(w, s.log.Breakdown(s.r))
	})
	mux.HandleFunc("GET /routes", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		s.log.WriteEntries(w)
	})
	mux.HandleFunc("DELETE /routes", func(w http.ResponseWriter, _ *http.Request) { s.log.Reset() })
	mux.HandleFunc("/", s.passThrough)
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away: nothing to do
}

// handleHealth is 200 only when every instance's /health is.
func (s *Server) handleHealth(w http.ResponseWriter, req *http.Request) {
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
	copyResponse(w, resp, nil)
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
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		http.Error(w, "router: body is not a JSON object: "+err.Error(), http.StatusBadRequest)
		return
	}
	var prompt []int64
	if endpoint == endpointChat {
		prompt, err = chatTokens(fields["messages"])
		err = prefixErr("messages", err)
	} else {
		prompt, err = promptTokens(fields["prompt"])
		err = prefixErr("prompt", err)
	}
	if err != nil {
		http.Error(w, "router: "+err.Error(), http.StatusBadRequest)
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
	if d.Prefill != d.Decode {
		params, status, err := s.remotePrefill(ctx, s.r.URL(d.Prefill)+endpoint, req.Header, fields)
		s.r.PrefillDone(d)
		e.PrefillMs = msSince(start)
		if err != nil {
			e.Status, e.Error = status, err.Error()
			http.Error(w, err.Error(), status)
			return
		}
		fields["kv_transfer_params"] = params
		if body, err = json.Marshal(fields); err != nil {
			e.Status, e.Error = http.StatusInternalServerError, err.Error()
			http.Error(w, err.Error(), e.Status)
			return
		}
	}
	resp, err := s.forward(ctx, s.r.URL(d.Decode)+endpoint, http.MethodPost, req.Header, body)
	if err != nil {
		e.Status, e.Error = http.StatusBadGateway, err.Error()
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	e.Status = resp.StatusCode
	copyResponse(w, resp, func() {
		s.r.PrefillDone(d) // the first bytes of the answer: the prefill is over
		e.FirstByteMs = msSince(start)
	})
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

// remotePrefill runs the prefill half of vLLM's disaggregated-prefill
// protocol on url: the request with max_tokens 1, no streaming, no
// min_tokens, and kv_transfer_params asking for a remote decode; the answer's
// kv_transfer_params tell the decode instance where the KV is. As vLLM's
// tests/v1/kv_connector/nixl_integration/toy_proxy_server.py
// (send_request_to_service, vLLM commit 030ea52e) does.
func (s *Server) remotePrefill(ctx context.Context, url string, h http.Header, fields map[string]json.RawMessage) (json.RawMessage, int, error) {
	p := make(map[string]json.RawMessage, len(fields)+1)
	for k, v := range fields {
		p[k] = v
	}
	p["kv_transfer_params"] = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)
	p["stream"] = json.RawMessage("false")
	p["max_tokens"] = json.RawMessage("1")
	if _, ok := p["max_completion_tokens"]; ok {
		p["max_completion_tokens"] = json.RawMessage("1")
	}
	delete(p, "stream_options")
	delete(p, "min_tokens")
	delete(p, "min_completion_tokens")
	body, err := json.Marshal(p)
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	hh := h.Clone()
	hh.Set("Accept", "application/json")
	resp, err := s.forward(ctx, url, http.MethodPost, hh, body)
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("router: prefill on %s: %w", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("router: prefill on %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, fmt.Errorf("router: prefill on %s: status %d: %s", url, resp.StatusCode, bytes.TrimSpace(out))
	}
	var ans struct {
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(out, &ans); err != nil || len(ans.KVTransferParams) == 0 || string(ans.KVTransferParams) == "null" {
		return nil, http.StatusBadGateway, fmt.Errorf("router: prefill on %s: no kv_transfer_params in its answer (is a KV connector configured?)", url)
	}
	return ans.KVTransferParams, http.StatusOK, nil
}

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

// copyResponse streams resp to w, flushing each read (SSE chunks pass as
// they come), and calls first once when the first body bytes arrive.
func copyResponse(w http.ResponseWriter, resp *http.Response, first func()) {
	for k, v := range resp.Header {
		if k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	var once sync.Once
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if first != nil {
				once.Do(first)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			return
		}
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

// prefixErr names the field an error is about (nil stays nil).
func prefixErr(field string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", field, err)
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
