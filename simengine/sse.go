package simengine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxBodyBytes bounds a request body (a 1M-token id list is about 8 MB).
const maxBodyBytes = 64 << 20

// serveGeneration serves one /v1/completions (chat false) or
// /v1/chat/completions (chat true) request whose body decode turns into a
// completionRequest.
func (e *Engine) serveGeneration(w http.ResponseWriter, r *http.Request, decode func([]byte) (*completionRequest, error), chat bool) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	fault := e.pickFault()
	if e.injectFault(w, r, fault) {
		return
	}
	req, ae := e.admit(w, r, decode)
	if ae != nil {
		ae.write(w)
		return
	}
	p := len(req.Prompt)
	if kt := req.KVTransfer; kt != nil && e.moon != nil && kt.TransferID != nil {
		req.xferKey = *kt.TransferID // the legs pair by it (mooncake.go)
	}
	if req.KVTransfer != nil && req.KVTransfer.DoRemotePrefill {
		pull := e.pullKV
		if e.moon != nil {
			pull = e.moon.pull
		}
		if err := pull(r.Context(), req); err != nil {
			return // the client went away during the transfer (or, Mooncake, before KV that never came)
		}
	}
	s, err := e.submit(req)
	if err != nil {
		(&apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError", msg: err.Error()}).write(w)
		return
	}
	rs := response{
		chat:    chat,
		id:      fmt.Sprintf("cmpl-%016x%016x", rand.Uint64(), rand.Uint64()),
		created: time.Now().Unix(),
		model:   e.cfg.Model,
		prompt:  p,
		fault:   fault,
	}
	if chat {
		rs.id = "chat" + rs.id
	}
	if req.Stream {
		e.streamResponse(w, r, s, req.IncludeUsage, rs)
	} else {
		e.wholeResponse(w, r, s, rs)
	}
}

// admit reads a generation request and checks it as vLLM's API server
// does: its body, its model, its length against the context and its KV
// transfer parameters (max_tokens defaults to the rest of the context). It
// returns the error to answer, if any.
func (e *Engine) admit(w http.ResponseWriter, r *http.Request, decode func([]byte) (*completionRequest, error)) (*completionRequest, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			return nil, badRequest("request body exceeds %d bytes", maxBodyBytes)
		}
		return nil, badRequest("reading the request body: %v", err)
	}
	req, err := decode(body)
	if err != nil {
		if ae, ok := errors.AsType[*apiError](err); ok {
			return nil, ae
		}
		return nil, badRequest("%v", err)
	}
	if req.Model != "" && req.Model != e.cfg.Model {
		return nil, &apiError{status: http.StatusNotFound, typ: "NotFoundError",
			msg: fmt.Sprintf("The model `%s` does not exist.", req.Model)}
	}
	p, maxLen := len(req.Prompt), e.cfg.MaxModelLen
	if req.MaxTokens == 0 && p < maxLen { // chat without max_tokens: vLLM's default, the rest of the context
		req.MaxTokens = maxLen - p
		req.MinTokens = min(req.MinTokens, req.MaxTokens)
	}
	if p >= maxLen {
		return nil, badRequest("This model's maximum context length is %d tokens. However, your request has %d input tokens. "+
			"Please reduce the length of the input messages.", maxLen, p)
	}
	if p+req.MaxTokens > maxLen {
		return nil, badRequest("This model's maximum context length is %d tokens. However, you requested %d tokens "+
			"(%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			maxLen, p+req.MaxTokens, p, req.MaxTokens)
	}
	if req.KVTransfer, err = decodeKVTransfer(req.kvRaw, e.cfg.KVRole, e.cfg.KVConnector); err != nil {
		return nil, err.(*apiError)
	}
	return req, nil
}

// submit queues a request for the step loop.
func (e *Engine) submit(req *completionRequest) (*seq, error) {
	hashes := chainHashes(req.Prompt, e.cfg.BlockSize)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, errShutdown
	}
	e.serial++
	s := &seq{
		serial: e.serial, promptLen: len(req.Prompt), numTokens: len(req.Prompt),
		maxTokens: req.MaxTokens, minTokens: req.MinTokens, ignoreEOS: req.IgnoreEOS,
		hashes: hashes, rng: rand.New(rand.NewPCG(uint64(e.cfg.Seed), e.serial)), stream: newTokenStream(),
	}
	if kt := req.KVTransfer; kt != nil {
		s.remoteKV, s.keepBlocks = kt.DoRemotePrefill, kt.DoRemoteDecode
		if e.moon != nil && kt.DoRemoteDecode {
			s.keepBlocks, s.xferKey = false, req.xferKey
			if s.xferKey != "" { // without a transfer_id its KV is never sent (mooncake.go)
				e.moon.register(s.xferKey)
			}
		}
	}
	e.sch.add(s)
	e.mu.Unlock()
	e.start()
	notify(e.wake)
	return s, nil
}

// abort ends s early (the client went away); the loop frees its blocks.
func (e *Engine) abort(s *seq) {
	e.mu.Lock()
	e.sch.abort(s)
	e.mu.Unlock()
	notify(e.wake)
}

// notify posts on ch, a channel of capacity 1, without blocking: a
// notification already pending stands for this one.
func notify(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// response holds what every chunk of one completion repeats.
type response struct {
	chat    bool // a chat completion (chat.go)
	id      string
	created int64
	model   string
	prompt  int
	fault   string // FaultNoUsage or FaultBadUsage change the usage chunk
}

func (rs response) head() string {
	m, _ := json.Marshal(rs.model)
	object := "text_completion"
	if rs.chat {
		object = "chat.completion.chunk"
	}
	return `{"id":"` + rs.id + `","object":"` + object + `","created":` + strconv.FormatInt(rs.created, 10) +
		`,"model":` + string(m)
}

// usageOf is a response's usage object, with vLLM's
// prompt_tokens_details.cached_tokens (the prompt tokens the request did
// not compute: prefix-cache hits and KV received from another instance)
// when the engine runs with --enable-prompt-tokens-details.
func (e *Engine) usageOf(s *seq, prompt, completion int) string {
	u := fmt.Sprintf(`{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d`, prompt, prompt+completion, completion)
	if !e.cfg.PromptTokensDetails {
		return u + "}"
	}
	e.mu.Lock()
	cached := s.cachedTokens
	e.mu.Unlock()
	return u + fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d}}`, cached)
}

// streamResponse writes vLLM's SSE stream: one chunk per token, flushed as
// soon as the step that produced it ends; the optional usage chunk; [DONE].
func (e *Engine) streamResponse(w http.ResponseWriter, r *http.Request, s *seq, includeUsage bool, rs response) {
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flush()
	head := rs.head()
	chunk, roleChunk := "data: "+head+`,"choices":[{"index":0,"text":`, ""
	if rs.chat {
		chunk = "data: " + head + `,"choices":[{"index":0,"delta":{"content":`
		roleChunk = "data: " + head + `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n"
	}
	var (
		buf  []byte
		evs  []tokenEvent
		sent int
	)
	for {
		if !e.awaitStream(r, s) {
			return
		}
		next, done, err := s.stream.take(evs)
		evs = next
		buf = buf[:0]
		if sent == 0 && len(evs) > 0 {
			buf = append(buf, roleChunk...) // vLLM's first chat chunk, sent with the first output
		}
		for _, ev := range evs {
			buf = append(buf, chunk...)
			buf = append(buf, ev.textJSON()...)
			if rs.chat {
				buf = append(buf, '}')
			}
			buf = append(buf, `,"logprobs":null,"finish_reason":`...)
			switch {
			case ev.finish == "" && rs.chat:
				buf = append(buf, "null}]}\n\n"...)
			case ev.finish == "":
				buf = append(buf, "null,\"stop_reason\":null}],\"usage\":null}\n\n"...)
			default:
				buf = strconv.AppendQuote(buf, ev.finish)
				buf = append(buf, ",\"stop_reason\":null}]"...)
				if !rs.chat {
					buf = append(buf, ",\"usage\":null"...)
				}
				buf = append(buf, "}\n\n"...)
			}
			sent++
		}
		switch {
		case done:
			if includeUsage && rs.fault != FaultNoUsage {
				n := sent
				if rs.fault == FaultBadUsage {
					n = 50 * sent
				}
				buf = append(buf, "data: "+head+`,"choices":[],"usage":`+e.usageOf(s, rs.prompt, n)+"}\n\n"...)
			}
			buf = append(buf, "data: [DONE]\n\n"...)
		case err != nil:
			msg, _ := json.Marshal(err.Error())
			buf = append(buf, `data: {"error":{"object":"error","message":`+string(msg)+
				`,"type":"InternalServerError","param":null,"code":500}}`+"\n\ndata: [DONE]\n\n"...)
		}
		if len(buf) > 0 {
			if _, werr := w.Write(buf); werr != nil {
				e.abort(s)
				return
			}
			flush()
		}
		if done || err != nil {
			return
		}
	}
}

// awaitStream waits until s's stream has news and returns true, or, when the
// client goes away first, aborts s and returns false.
func (e *Engine) awaitStream(r *http.Request, s *seq) bool {
	select {
	case <-s.stream.notify:
		return true
	case <-r.Context().Done():
		e.abort(s)
		return false
	}
}

// wholeResponse waits for the whole completion and returns one JSON object.
func (e *Engine) wholeResponse(w http.ResponseWriter, r *http.Request, s *seq, rs response) {
	var (
		text   strings.Builder
		evs    []tokenEvent
		n      int
		finish string
	)
	for {
		if !e.awaitStream(r, s) {
			return
		}
		next, done, err := s.stream.take(evs)
		evs = next
		for _, ev := range evs {
			text.WriteString(ev.text())
			n++
			finish = ev.finish
		}
		if done {
			break
		}
		if err != nil {
			(&apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: err.Error()}).write(w)
			return
		}
	}
	txt, _ := json.Marshal(text.String())
	fin, _ := json.Marshal(finish)
	body := rs.head() + `,"choices":[{"index":0,"text":` + string(txt) + `,"logprobs":null,"finish_reason":` + string(fin) +
		`,"stop_reason":null,"prompt_logprobs":null}],"usage":` + e.usageOf(s, rs.prompt, n)
	if rs.chat {
		body = strings.Replace(rs.head(), `"chat.completion.chunk"`, `"chat.completion"`, 1) +
			`,"choices":[{"index":0,"message":{"role":"assistant","content":` + string(txt) + `},"logprobs":null,"finish_reason":` + string(fin) +
			`,"stop_reason":null}],"usage":` + e.usageOf(s, rs.prompt, n)
	}
	if s.keepBlocks && finish == "length" { // NixlConnector, length-capped only (nixl_connector.py:918-924 at vLLM b36adfa3); a MooncakeConnector answers none (mooncake.go)
		e.mu.Lock()
		blocks := s.sentBlocks
		e.mu.Unlock()
		body += `,"kv_transfer_params":` + remoteDecodeParams(r.Host, blocks)
	}
	body += "}\n"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, body)
}
