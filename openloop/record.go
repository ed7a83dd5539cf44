package openloop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"
)

// Phases of a run, as written in Record.Phase.
const (
	PhaseFill    = "fill"    // cache-fill requests, before the open-loop phases
	PhaseWarmup  = "warmup"  // open-loop requests discarded from the statistics
	PhaseMeasure = "measure" // the measured requests
)

// Request outcomes, as written in Record.Status.
const (
	StatusOK    = "ok"
	StatusError = "error"
)

// Record is one request, one line of requests.jsonl. All *Ns times are
// monotonic nanoseconds since the run's start (Result.Start); a time that was
// never reached is 0.
type Record struct {
	ID           int    `json:"id"`                // unique in the run: fill first, then warmup and measure in schedule order
	Cell         string `json:"cell"`              // Config.Cell
	Block        int    `json:"block"`             // Config.Block
	Phase        string `json:"phase"`             // PhaseFill, PhaseWarmup, PhaseRamp or PhaseMeasure
	ScheduledNs  int64  `json:"scheduled_ns"`      // intended send time
	SentNs       int64  `json:"sent_ns"`           // actual send time: when the request had been written (0: never written, e.g. connection refused)
	HeadNs       int64  `json:"head_ns,omitempty"` // the response head (status line and headers) received: the server acknowledged the request (0: no response)
	FirstTokenNs int64  `json:"first_token_ns"`    // first chunk that carried choices, whatever its text (vLLM's client's first token)
	LastTokenNs  int64  `json:"last_token_ns"`     // last chunk that carried choices, empty text included (the end vLLM's client times to)
	DoneNs       int64  `json:"done_ns"`           // end of the stream, or the failure
	InputTokens  int    `json:"input_tokens"`      // prompt token ids sent; for a text prompt (chat, dataset) the engine's usage.prompt_tokens, or the words sent without it
	OutputTokens int    `json:"output_tokens"`     // from the usage chunk (see UsageMissing)
	// CachedTokens is the usage chunk's prompt_tokens_details.cached_tokens:
	// the prompt tokens the engine's prefix cache held; nil when the engine
	// did not say.
	CachedTokens *int       `json:"cached_tokens,omitempty"`
	ITLMs        []float64  `json:"itl_ms"` // gaps between consecutive chunks that carried choices, ms
	Status       string     `json:"status"` // StatusOK or StatusError
	Error        string     `json:"error,omitempty"`
	ErrorClass   ErrorClass `json:"error_class,omitempty"` // what kind of failure (see ErrorClasses); empty when ok
	HTTPStatus   int        `json:"http_status,omitempty"`
	Target       string     `json:"target,omitempty"`       // base URL the request went to
	RequestID    string     `json:"request_id,omitempty"`   // X-Request-Id sent: the id vLLM logs the request under
	Session      string     `json:"session,omitempty"`      // trace replay: session id
	Turn         int        `json:"turn,omitempty"`         // trace replay: turn within the session
	PrefixGroup  int        `json:"prefix_group,omitempty"` // shared-prefix shape: group number, 1-based (0 = none)
	TraceNs      int64      `json:"trace_ns,omitempty"`     // trace replay: the trace's own (scaled) send time
	Ramp         bool       `json:"ramp,omitempty"`         // sent while the rate ramped up (phase ramp, or measure with include_ramp)
	// UsageMissing is set when the stream had no usage chunk and
	// OutputTokens counts content chunks instead.
	UsageMissing bool `json:"usage_missing,omitempty"`
	// QueuedNs is how long the request waited, once due, for a slot under
	// Arrival.MaxInFlight (vllm bench serve's --max-concurrency): part of
	// SentNs − ScheduledNs that is the cap's, not the generator's lag.
	QueuedNs int64 `json:"queued_ns,omitempty"`
	// Resent: the request was written on a reused connection that the
	// server had closed, nothing of a response came back, and it was sent
	// again on a new connection (SentNs is the second send).
	Resent    bool `json:"resent,omitempty"`
	MaxTokens int  `json:"max_tokens,omitempty"` // the max_tokens (= min_tokens, with ignore_eos) the request asked for
	// FinishReason is the last choices[0].finish_reason the stream gave
	// (FinishStop, FinishLength or the engine's own word); empty when it
	// gave none.
	FinishReason string `json:"finish_reason,omitempty"`
}

// The finish reasons every OpenAI-compatible engine gives: the model ended
// (end of generation, a stop string) or max_tokens was reached (or, for
// llama-server, the slot's context ran out).
const (
	FinishStop   = "stop"
	FinishLength = "length"
)

// OK reports whether the request completed successfully.
func (r *Record) OK() bool { return r.Status == StatusOK }

// The request latencies, defined here once and called by every summary,
// class table, SLO check and report. They follow vLLM's benchmark client
// to the chunk (vllm/benchmarks/lib/endpoint_request_func.py at commit
// b36adfa3, in 0.18.1; async_request_openai_completions, lines 221–249): its clock
// starts when the request is sent (mbench: SentNs, when it had been
// written), its first token is the first chunk that carries choices
// (FirstTokenNs), whatever the text, and its end ("latency") the last such
// chunk (LastTokenNs), empty text included — so the end-of-generation
// token that llama-server streams as an empty chunk, and the chunk with
// the finish reason, count. Each returns ok = false when it was not
// measured (no chunk with choices, or never sent).

// TTFT is the time to first token from the actual send (vllm bench serve's
// definition); 0 when it was not measured.
func (r *Record) TTFT() time.Duration { d, _ := r.ttftNs(); return time.Duration(d) }

// E2EL is the end-to-end latency: the last chunk with choices minus the
// send; 0 when it was not measured.
func (r *Record) E2EL() time.Duration { d, _ := r.e2elNs(); return time.Duration(d) }

// TTFTMs is TTFT in ms.
func (r *Record) TTFTMs() (float64, bool) {
	d, ok := r.ttftNs()
	return float64(d) / 1e6, ok
}

// E2ELMs is E2EL in ms; measured only where TTFT is.
func (r *Record) E2ELMs() (float64, bool) {
	d, ok := r.e2elNs()
	return float64(d) / 1e6, ok
}

// TPOTMs is the time per output token after the first, in ms: (E2EL −
// TTFT) / (output tokens − 1), measured only with more than one output
// token (vLLM's serve.py leaves TPOT out for a one-token output).
func (r *Record) TPOTMs() (float64, bool) {
	t, ok := r.TTFTMs()
	e, ok2 := r.E2ELMs()
	if !ok || !ok2 || r.OutputTokens <= 1 {
		return 0, false
	}
	return (e - t) / float64(r.OutputTokens-1), true
}

// TTFTIntendedMs is the time to first token from the intended send time,
// in ms. It includes any generator lag, so coordinated omission cannot
// hide delay; measured where TTFT is and the schedule gave a time.
func (r *Record) TTFTIntendedMs() (float64, bool) {
	if _, ok := r.ttftNs(); !ok || r.ScheduledNs <= 0 {
		return 0, false
	}
	return float64(r.FirstTokenNs-r.ScheduledNs) / 1e6, true
}

func (r *Record) ttftNs() (int64, bool) {
	if r.FirstTokenNs <= 0 || r.SentNs <= 0 {
		return 0, false
	}
	return r.FirstTokenNs - r.SentNs, true
}

func (r *Record) e2elNs() (int64, bool) {
	if _, ok := r.ttftNs(); !ok || r.LastTokenNs <= 0 {
		return 0, false
	}
	return r.LastTokenNs - r.SentNs, true
}

// Lag is the send lag: actual minus intended send time, less any wait for
// a slot under a concurrency cap (QueuedNs), which is the cap's doing.
func (r *Record) Lag() time.Duration { return time.Duration(r.SentNs - r.ScheduledNs - r.QueuedNs) }

// AppendJSON appends r as one JSON object (no newline) to b, without
// reflection and without allocating when b has room. The output decodes with
// encoding/json into an equal Record.
func (r *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, int64(r.ID), 10)
	b = appendStringField(b, "cell", r.Cell)
	b = appendIntField(b, "block", int64(r.Block))
	b = appendStringField(b, "phase", r.Phase)
	b = appendIntField(b, "scheduled_ns", r.ScheduledNs)
	b = appendIntField(b, "sent_ns", r.SentNs)
	b = appendIntOmit(b, "head_ns", r.HeadNs)
	b = appendIntField(b, "first_token_ns", r.FirstTokenNs)
	b = appendIntField(b, "last_token_ns", r.LastTokenNs)
	b = appendIntField(b, "done_ns", r.DoneNs)
	b = appendIntField(b, "input_tokens", int64(r.InputTokens))
	b = appendIntField(b, "output_tokens", int64(r.OutputTokens))
	if r.CachedTokens != nil {
		b = appendIntField(b, "cached_tokens", int64(*r.CachedTokens))
	}
	b = append(b, `,"itl_ms":[`...)
	for i, v := range r.ITLMs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, v, 'f', -1, 64)
	}
	b = append(b, ']')
	b = appendStringField(b, "status", r.Status)
	b = appendStringOmit(b, "error", r.Error)
	b = appendStringOmit(b, "error_class", string(r.ErrorClass))
	b = appendIntOmit(b, "http_status", int64(r.HTTPStatus))
	b = appendStringOmit(b, "target", r.Target)
	b = appendStringOmit(b, "request_id", r.RequestID)
	b = appendStringOmit(b, "session", r.Session)
	b = appendIntOmit(b, "turn", int64(r.Turn))
	b = appendIntOmit(b, "prefix_group", int64(r.PrefixGroup))
	b = appendIntOmit(b, "trace_ns", r.TraceNs)
	b = appendTrue(b, "ramp", r.Ramp)
	b = appendTrue(b, "usage_missing", r.UsageMissing)
	b = appendIntOmit(b, "max_tokens", int64(r.MaxTokens))
	b = appendIntOmit(b, "queued_ns", r.QueuedNs)
	b = appendTrue(b, "resent", r.Resent)
	b = appendStringOmit(b, "finish_reason", r.FinishReason)
	return append(b, '}')
}

// appendIntField appends ,"name":v; name needs no escaping.
func appendIntField(b []byte, name string, v int64) []byte {
	return strconv.AppendInt(appendKey(b, name), v, 10)
}

// appendStringField appends ,"name":"v"; name needs no escaping.
func appendStringField(b []byte, name, v string) []byte {
	return appendJSONString(appendKey(b, name), v)
}

// appendIntOmit appends ,"name":v unless v is 0 (omitempty).
func appendIntOmit(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	return appendIntField(b, name, v)
}

// appendStringOmit appends ,"name":"v" unless v is empty (omitempty).
func appendStringOmit(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendStringField(b, name, v)
}

// appendTrue appends ,"name":true when v is (omitempty).
func appendTrue(b []byte, name string, v bool) []byte {
	if !v {
		return b
	}
	return append(appendKey(b, name), "true"...)
}

func appendKey(b []byte, name string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// ReadRecords reads requests.jsonl strictly: unknown fields, a bad phase or
// status, negative times and out-of-order token times are errors that name
// the line. Blank lines are skipped.
func ReadRecords(r io.Reader) ([]Record, error) {
	var out []Record
	err := eachLine(r, maxDatasetLine, func(_ int, b []byte) error {
		rec, err := parseRecordLine(b)
		if err != nil {
			return err
		}
		out = append(out, rec)
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("requests line %w", err)
	}
	return out, nil
}

func parseRecordLine(b []byte) (Record, error) {
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return rec, fmt.Errorf("%s: want %s, got %s", te.Field, te.Type, te.Value)
		}
		return rec, fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return rec, errors.New("invalid JSON: more than one value on the line")
	}
	return rec, rec.validate()
}

func (r *Record) validate() error {
	switch r.Phase {
	case PhaseFill, PhaseWarmup, PhaseRamp, PhaseMeasure:
	default:
		return fmt.Errorf("phase: %q is not fill, warmup, ramp or measure", r.Phase)
	}
	switch r.Status {
	case StatusOK, StatusError:
	default:
		return fmt.Errorf("status: %q is not ok or error", r.Status)
	}
	if r.ID < 0 {
		return fmt.Errorf("id: must be ≥ 0, got %d", r.ID)
	}
	times := [...]struct {
		name string
		v    int64
	}{{"scheduled_ns", r.ScheduledNs}, {"sent_ns", r.SentNs}, {"head_ns", r.HeadNs}, {"first_token_ns", r.FirstTokenNs}, {"last_token_ns", r.LastTokenNs}, {"done_ns", r.DoneNs}}
	for _, t := range times {
		if t.v < 0 {
			return fmt.Errorf("%s: must be ≥ 0, got %d", t.name, t.v)
		}
	}
	if r.HeadNs != 0 && r.HeadNs < r.SentNs {
		return fmt.Errorf("head_ns: %d is before sent_ns %d", r.HeadNs, r.SentNs)
	}
	if r.FirstTokenNs != 0 && r.FirstTokenNs < r.SentNs {
		return fmt.Errorf("first_token_ns: %d is before sent_ns %d", r.FirstTokenNs, r.SentNs)
	}
	if r.LastTokenNs != 0 && r.LastTokenNs < r.FirstTokenNs {
		return fmt.Errorf("last_token_ns: %d is before first_token_ns %d", r.LastTokenNs, r.FirstTokenNs)
	}
	if r.InputTokens < 0 || r.OutputTokens < 0 || r.MaxTokens < 0 {
		return fmt.Errorf("input_tokens/output_tokens/max_tokens: must be ≥ 0, got %d/%d/%d", r.InputTokens, r.OutputTokens, r.MaxTokens)
	}
	if r.ErrorClass != "" && !r.ErrorClass.Valid() {
		return fmt.Errorf("error_class: %q is not one of %s", r.ErrorClass, joinClasses())
	}
	if r.Status == StatusOK && r.ErrorClass != "" {
		return fmt.Errorf("error_class: set on a request with status ok: %q", r.ErrorClass)
	}
	if r.Status == StatusOK && r.Error != "" {
		return fmt.Errorf("error: set on a request with status ok: %q", r.Error)
	}
	return nil
}
