package openloop

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
)

// ErrorClass is the kind of a failed request, one word each, so that failures
// are counted by what happened rather than by their raw text (which carries
// client ports and request ids and would make every failure its own key).
type ErrorClass string

// The classes of failed requests. A record with status ok has none.
const (
	ErrClassHTTP4xx          ErrorClass = "http_4xx"           // a 4xx other than 429 and context length
	ErrClassHTTP429          ErrorClass = "http_429"           // rate limited by the server
	ErrClassHTTP5xx          ErrorClass = "http_5xx"           // the engine failed the request
	ErrClassHTTPOther        ErrorClass = "http_other"         // any other non-200 status
	ErrClassContextLength    ErrorClass = "context_length"     // prompt + output longer than the engine's max model length
	ErrClassTimeout          ErrorClass = "timeout"            // the request's own deadline (measure.request_timeout), or the transport's
	ErrClassConnRefused      ErrorClass = "connection_refused" // nothing listening on the port
	ErrClassConnReset        ErrorClass = "connection_reset"   // the connection was reset or closed under the request
	ErrClassMalformedStream  ErrorClass = "malformed_stream"   // an SSE chunk that is not a completion chunk, or a response that is not HTTP/1.x
	ErrClassIncompleteStream ErrorClass = "incomplete_stream"  // the stream ended before [DONE]
	ErrClassStreamError      ErrorClass = "stream_error"       // the server reported an error inside the stream
	ErrClassEmptyStream      ErrorClass = "empty_stream"       // the stream ended with [DONE] and no content token
	ErrClassUsageMismatch    ErrorClass = "usage_mismatch"     // usage.completion_tokens below the content chunks streamed, or above the max_tokens asked for
	ErrClassDrained          ErrorClass = "drained"            // still in flight when the run's drain timeout ended it (a symptom, not an engine error)
	ErrClassStreamTooLarge   ErrorClass = "stream_too_large"   // a stream line over 16 MiB, or the run's buffer budget (Config.StreamMemory) spent
	ErrClassCanceled         ErrorClass = "canceled"           // the run stopped (interrupt, abort) while the request was in flight
	ErrClassOther            ErrorClass = "other"              // none of the above (the record's error text says what)
)

// ErrorClasses lists every class, in the order reports print them.
var ErrorClasses = []ErrorClass{
	ErrClassHTTP5xx, ErrClassHTTP429, ErrClassContextLength, ErrClassHTTP4xx, ErrClassHTTPOther,
	ErrClassTimeout, ErrClassConnRefused, ErrClassConnReset,
	ErrClassMalformedStream, ErrClassIncompleteStream, ErrClassStreamError, ErrClassEmptyStream, ErrClassUsageMismatch, ErrClassStreamTooLarge,
	ErrClassDrained, ErrClassCanceled, ErrClassOther,
}

// Valid reports whether c is one of ErrorClasses.
func (c ErrorClass) Valid() bool { return slices.Contains(ErrorClasses, c) }

// joinClasses lists ErrorClasses for a message.
func joinClasses() string {
	parts := make([]string, len(ErrorClasses))
	for i, c := range ErrorClasses {
		parts[i] = string(c)
	}
	return strings.Join(parts, ", ")
}

// ClassifyHTTP is the class of a non-200 answer with the start of its body.
// vLLM answers 400 with "maximum context length" (or "max_model_len") in the
// message when a prompt does not fit; llama.cpp's llama-server answers 400
// with type "exceed_context_size_error" and "exceeds the available context
// size" (tools/server/server-common.cpp:51-53 and
// server-context.cpp:3180-3197 at 80fb11ac).
func ClassifyHTTP(status int, body string) ErrorClass {
	switch {
	case status == 429:
		return ErrClassHTTP429
	case status == 400 || status == 413 || status == 422:
		if isContextLength(body) {
			return ErrClassContextLength
		}
		return ErrClassHTTP4xx
	case status >= 400 && status < 500:
		return ErrClassHTTP4xx
	case status >= 500 && status < 600:
		return ErrClassHTTP5xx
	default:
		return ErrClassHTTPOther
	}
}

func isContextLength(body string) bool {
	b := strings.ToLower(body)
	return slices.ContainsFunc([]string{"maximum context length", "max_model_len", "context length", "too long", "max-model-len", "exceed_context_size_error", "context size"},
		func(s string) bool { return strings.Contains(b, s) })
}

// AbortCause is why the load generator stopped a run early.
type AbortCause string

// The abort causes. Only AbortOverload says the engine could not keep up.
const (
	AbortOverload AbortCause = "overload" // abort_if: too many in flight, a first token too late
	AbortFailures AbortCause = "failures" // the requests kept failing: an engine error, not saturation
	AbortHarness  AbortCause = "harness"  // the load generator itself could not go on (a write failed)
)

// errIncompleteStream marks a stream that ended before [DONE].
var errIncompleteStream = errors.New("stream ended before [DONE]")

// errMalformed marks an SSE chunk that could not be read as a completion chunk.
var errMalformed = errors.New("malformed stream chunk")

// ClassifyErr is the class of a transport or stream error; ctx is the
// request's context (a cancelled run makes every in-flight error canceled or
// timeout, whatever the transport said).
func ClassifyErr(ctx context.Context, err error) ErrorClass {
	if ctx != nil && ctx.Err() != nil {
		if sc, ok := errors.AsType[*stopCause](context.Cause(ctx)); ok && sc == causeDrain {
			return ErrClassDrained
		}
		if c := context.Cause(ctx); errors.Is(c, context.DeadlineExceeded) || errors.Is(c, errRequestTimeout) {
			return ErrClassTimeout
		}
		return ErrClassCanceled
	}
	var se *errStream
	switch {
	case err == nil:
		return ""
	case errors.As(err, &se):
		if isContextLength(se.msg) {
			return ErrClassContextLength
		}
		return ErrClassStreamError
	case errors.Is(err, errIncompleteStream):
		return ErrClassIncompleteStream
	case errors.Is(err, errMalformed), errors.Is(err, errMalformedHTTP):
		return ErrClassMalformedStream
	case errors.Is(err, errTooLarge):
		return ErrClassStreamTooLarge
	case errors.Is(err, syscall.ECONNREFUSED):
		return ErrClassConnRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return ErrClassConnReset
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return ErrClassTimeout
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return ErrClassTimeout
	}
	return ErrClassOther
}
