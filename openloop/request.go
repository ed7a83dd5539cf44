package openloop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Request is what every request of a run carries beyond its prompt and its
// length: extra headers, an API key, sampling parameters, extra body fields,
// and whether the engine may end an output at end-of-sequence. The zero
// value sends what mbench always sent: fixed lengths (max_tokens =
// min_tokens, ignore_eos), the engine's default sampling, no extra header.
type Request struct {
	// Headers are sent with every request (and the model lookup). Their
	// values are never recorded: a header may carry a credential.
	Headers map[string]string
	// APIKey, when set, is sent as "Authorization: Bearer <key>". The caller
	// reads it from the environment; it is never recorded or logged.
	APIKey string
	// NaturalLength lets the engine end each output at end-of-sequence:
	// ignore_eos and min_tokens are not sent, and max_tokens (the shape's
	// output length) only caps it. The output lengths are then the
	// engine's, and the summary reports their distribution.
	NaturalLength bool
	Sampling      Sampling
	// ExtraBody are top-level fields added to every request body, as JSON
	// values (vllm bench serve's --extra-body). A field mbench writes
	// itself (model, prompt, messages, max_tokens, min_tokens, ignore_eos,
	// stream, stream_options, or a sampling parameter) is refused: it has
	// its own option.
	ExtraBody map[string]json.RawMessage
}

// Sampling are the sampling parameters of every request, as vLLM's
// OpenAI-compatible server takes them; nil leaves a parameter to the
// engine's default (vLLM: the model's generation config, else greedy-free
// temperature 1).
type Sampling struct {
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	TopK              *int     `json:"top_k,omitempty"`
	MinP              *float64 `json:"min_p,omitempty"`
	PresencePenalty   *float64 `json:"presence_penalty,omitempty"`
	FrequencyPenalty  *float64 `json:"frequency_penalty,omitempty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty"`
}

// ownedFields are the body fields mbench writes itself.
var ownedFields = []string{"model", "prompt", "messages", "max_tokens", "min_tokens", "ignore_eos", "stream", "stream_options",
	"temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"}

// ownedHeaders are the headers mbench writes or whose framing it owns.
var ownedHeaders = []string{"Host", "Content-Length", "Content-Type", "Accept", "Transfer-Encoding", "Connection",
	"Keep-Alive", "Upgrade", "Te", "Trailer", "X-Request-Id", "X-Mbench-Id", "X-Mbench-Session", "User-Agent"}

// Validate reports a header, key, sampling parameter or body field that
// cannot be sent (a FieldError under "request"). Its messages name headers
// and fields, never their values.
func (q *Request) Validate() error {
	var ps problems
	for name, v := range q.Headers {
		canon := http.CanonicalHeaderKey(name)
		ps.check(!validHeaderName(name), namedErr("request.headers", fmt.Sprintf("header %q", name), "", "not a valid header name"))
		ps.check(slices.Contains(ownedHeaders, canon), namedErr("request.headers", "header "+canon, "", "mbench sets it itself"))
		ps.check(canon == "Authorization" && q.APIKey != "", fieldErr("request", "", "header Authorization and an API key: give one (the key is sent as Authorization: Bearer)"))
		ps.check(!validHeaderValue(v), namedErr("request.headers", "header "+canon, "", "its value has control characters"))
	}
	ps.check(!validHeaderValue(q.APIKey) || strings.ContainsAny(q.APIKey, " \t"), fieldErr("request", "", "API key: spaces or control characters cannot go in an Authorization header"))
	ps = append(ps, q.Sampling.problems().under("request", "")...)
	for k, v := range q.ExtraBody {
		ps.check(slices.Contains(ownedFields, k), namedErr("request.extra_body", fmt.Sprintf("extra body field %q", k), "", "mbench writes it (use its own option)"))
		ps.check(!json.Valid(v), namedErr("request.extra_body", fmt.Sprintf("extra body field %q", k), "", "not a JSON value"))
	}
	return first(ps)
}

// problems checks each parameter against the range vLLM's SamplingParams
// accepts (vllm/sampling_params.py, _verify_args).
func (s Sampling) problems() problems {
	var ps problems
	for _, c := range []struct {
		name   string
		v      *float64
		lo, hi float64
		open   bool // lo excluded
	}{
		{"temperature", s.Temperature, 0, math.Inf(1), false},
		{"top_p", s.TopP, 0, 1, true},
		{"min_p", s.MinP, 0, 1, false},
		{"presence_penalty", s.PresencePenalty, -2, 2, false},
		{"frequency_penalty", s.FrequencyPenalty, -2, 2, false},
		{"repetition_penalty", s.RepetitionPenalty, 0, math.Inf(1), true},
	} {
		if c.v == nil {
			continue
		}
		x, lo := *c.v, "["
		if c.open {
			lo = "("
		}
		ps.check(math.IsNaN(x) || math.IsInf(x, 0) || x < c.lo || x > c.hi || (c.open && x == c.lo),
			namedErr("sampling."+c.name, fmt.Sprintf("%s %v", c.name, x), "", "must be in %s%g, %g]", lo, c.lo, c.hi))
	}
	if k := s.TopK; k != nil {
		ps.check(*k < -1, namedErr("sampling.top_k", fmt.Sprintf("top_k %d", *k), "", "must be -1 or 0 (off) or a positive count"))
	}
	return ps
}

// Any reports whether s sets a parameter.
func (s Sampling) Any() bool { return s != Sampling{} }

// validHeaderName reports whether n is an HTTP token (RFC 9110 §5.6.2).
func validHeaderName(n string) bool {
	return n != "" && strings.Trim(n, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") == ""
}

// header is the extra headers of q (the API key as Authorization) with
// canonical names, sorted: what every request adds to its own.
func (q *Request) header() [][2]string {
	var out [][2]string
	for k, v := range q.Headers {
		out = append(out, [2]string{http.CanonicalHeaderKey(k), v})
	}
	if q.APIKey != "" {
		out = append(out, [2]string{"Authorization", "Bearer " + q.APIKey})
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return out
}

// bodyTail is the part of every request body after max_tokens's value,
// encoded once per run: ,"min_tokens":O (fixed lengths) and then fixed.
type bodyTail struct {
	minTokens bool   // write ,"min_tokens":O (the output length)
	fixed     []byte // ignore_eos, sampling, extra fields, streaming options and the closing brace
}

// defaultTail is the tail of the zero Request.
var defaultTail = newBodyTail(&Request{})

// newBodyTail encodes q's part of the body.
func newBodyTail(q *Request) bodyTail {
	t := bodyTail{minTokens: !q.NaturalLength}
	var b bytes.Buffer
	if !q.NaturalLength {
		b.WriteString(`,"ignore_eos":true`)
	}
	if q.Sampling.Any() {
		js, _ := json.Marshal(q.Sampling) // pointers to finite numbers: cannot fail
		if len(js) > 2 {
			b.WriteByte(',')
			b.Write(js[1 : len(js)-1])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(q.ExtraBody)) {
		var v bytes.Buffer
		if err := json.Compact(&v, q.ExtraBody[k]); err != nil {
			continue // Validate refuses it before a run
		}
		b.WriteByte(',')
		b.Write(appendJSONString(nil, k))
		b.WriteByte(':')
		b.Write(v.Bytes())
	}
	b.WriteString(`,"stream":true,"stream_options":{"include_usage":true}}`)
	t.fixed = b.Bytes()
	return t
}

// appendLengthTail appends the output length O as max_tokens's value, then
// ,"min_tokens":O with fixed lengths, and the rest of t: every request
// body ends so.
func appendLengthTail(b []byte, output int, t *bodyTail) []byte {
	b = strconv.AppendInt(b, int64(output), 10)
	if t.minTokens {
		b = append(b, `,"min_tokens":`...)
		b = strconv.AppendInt(b, int64(output), 10)
	}
	return append(b, t.fixed...)
}
