package simengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
)

// maxTokenID bounds prompt token ids (the sim's "vocabulary size").
const maxTokenID = 1<<31 - 1

// defaultMaxTokens is vLLM's default max_tokens for /v1/completions.
const defaultMaxTokens = 16

// completionRequest is a validated POST /v1/completions body.
type completionRequest struct {
	Model        string  // "" = the served model
	Prompt       []int64 // token ids
	MaxTokens    int
	MinTokens    int
	IgnoreEOS    bool
	Stream       bool
	IncludeUsage bool
	KVTransfer   *kvTransferParams // nil = none (see pd.go)
	kvRaw        json.RawMessage
	xferKey      string // MooncakeConnector: the transfer key of a leg (mooncake.go)
}

// apiError is an OpenAI/vLLM-style error response.
type apiError struct {
	status int
	typ    string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: fmt.Sprintf(format, args...)}
}

// errorBody is vLLM's error response object, fields in vLLM's order.
type errorBody struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// write sends e as {"object":"error","message":...,"type":...,"param":null,"code":...}.
func (e *apiError) write(w http.ResponseWriter) {
	writeJSON(w, e.status, errorBody{Object: "error", Message: e.msg, Type: e.typ, Code: e.status})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // plain values: cannot fail
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

type rawRequest struct {
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	rawCommon
}

// rawCommon holds the request fields /v1/completions and
// /v1/chat/completions share beyond the prompt and max_tokens.
type rawCommon struct {
	Model *string `json:"model"`
	// KVTransferParams is vLLM's field of both endpoints for disaggregated
	// prefill (see pd.go).
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	MinTokens        *int            `json:"min_tokens"`
	IgnoreEOS        *bool           `json:"ignore_eos"`
	Stream           *bool           `json:"stream"`
	N                *int            `json:"n"`
	StreamOptions    *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

// apply validates the shared fields into req, whose MaxTokens is set (0 =
// not given, chat only).
func (c *rawCommon) apply(req *completionRequest) error {
	if c.Model != nil {
		req.Model = *c.Model
	}
	if c.MinTokens != nil {
		req.MinTokens = *c.MinTokens
	}
	if req.MinTokens < 0 {
		return badRequest("min_tokens must be greater than or equal to 0, got %d.", req.MinTokens)
	}
	if req.MaxTokens > 0 && req.MinTokens > req.MaxTokens {
		return badRequest("min_tokens must be less than or equal to max_tokens=%d, got %d.", req.MaxTokens, req.MinTokens)
	}
	if c.N != nil && *c.N != 1 {
		return badRequest("n: the simulated engine supports n=1 only, got %d", *c.N)
	}
	req.IgnoreEOS = c.IgnoreEOS != nil && *c.IgnoreEOS
	req.Stream = c.Stream != nil && *c.Stream
	if c.StreamOptions != nil {
		if !req.Stream {
			return badRequest("Stream options can only be defined when `stream=True`.")
		}
		req.IncludeUsage = c.StreamOptions.IncludeUsage != nil && *c.StreamOptions.IncludeUsage
	}
	req.kvRaw = c.KVTransferParams
	return nil
}

// decodeCompletionRequest parses and validates a /v1/completions body the way
// vLLM does for the fields the sim uses; other fields (temperature, ...) are
// accepted and ignored. Errors are 400 apiErrors.
func decodeCompletionRequest(body []byte) (*completionRequest, error) {
	var raw rawRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		return nil, badRequest("invalid JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, badRequest("invalid JSON body: data after the request object")
	}
	if raw.Prompt == nil || string(bytes.TrimSpace(raw.Prompt)) == "null" {
		return nil, badRequest("prompt: field required (a string or a list of token ids)")
	}
	ids, err := decodePrompt(raw.Prompt, true)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, badRequest("prompt: must not be empty")
	}
	req := &completionRequest{Prompt: ids, MaxTokens: defaultMaxTokens}
	if raw.MaxTokens != nil {
		req.MaxTokens = *raw.MaxTokens
	}
	if req.MaxTokens < 1 {
		return nil, badRequest("max_tokens must be at least 1, got %d.", req.MaxTokens)
	}
	if err := raw.apply(req); err != nil {
		return nil, err
	}
	return req, nil
}

// decodePrompt accepts a string, a list of token ids, or (when outer) a
// one-element list holding either.
func decodePrompt(msg json.RawMessage, outer bool) ([]int64, error) {
	msg = bytes.TrimSpace(msg)
	if len(msg) > 0 && msg[0] == '"' {
		var s string
		if err := json.Unmarshal(msg, &s); err != nil {
			return nil, badRequest("prompt: %v", err)
		}
		return tokenize(s), nil
	}
	var ids []int64
	if err := json.Unmarshal(msg, &ids); err == nil {
		for i, id := range ids {
			if id < 0 || id > maxTokenID {
				return nil, badRequest("prompt: token id %d at index %d is out of vocabulary (0..%d)", id, i, maxTokenID)
			}
		}
		return ids, nil
	}
	if outer {
		var batch []json.RawMessage
		if err := json.Unmarshal(msg, &batch); err == nil && isBatch(batch) {
			if len(batch) != 1 {
				return nil, badRequest("prompt: the simulated engine takes one prompt per request, got a batch of %d", len(batch))
			}
			return decodePrompt(batch[0], false)
		}
	}
	return nil, badRequest("prompt: must be a string or a list of integer token ids")
}

// isBatch reports whether a list holds prompts (strings or lists), not ids.
func isBatch(list []json.RawMessage) bool {
	for _, m := range list {
		m = bytes.TrimSpace(m)
		if len(m) == 0 || (m[0] != '"' && m[0] != '[') {
			return false
		}
	}
	return len(list) > 0
}

// tokenize is the sim's tokenizer: one token per whitespace-separated word,
// its id a hash of the word.
func tokenize(s string) []int64 {
	words := strings.Fields(s)
	ids := make([]int64, len(words))
	for i, w := range words {
		h := fnv.New64a()
		_, _ = h.Write([]byte(w))
		ids[i] = int64(h.Sum64() % (maxTokenID + 1))
	}
	return ids
}
