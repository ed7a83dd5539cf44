package simengine

import (
	"fmt"
	"net/http"
)

// Faults the sim can inject into every completion request, to show what a
// misbehaving engine does to a run (--fault). They model engine failures a
// real server produces; none is vLLM's normal behaviour.
const (
	FaultNone      = ""          // serve normally
	FaultHTTP500   = "http500"   // answer 500 Internal Server Error
	FaultHTTP429   = "http429"   // answer 429 Too Many Requests
	FaultMalformed = "malformed" // stream one chunk that is not JSON, then [DONE]
	FaultTruncate  = "truncate"  // stream one token, then close without [DONE]
	FaultHang      = "hang"      // accept the request and never answer
	FaultEmpty     = "empty"     // 200, one chunk with empty text, usage with 0 completion tokens, [DONE]
	FaultNoUsage   = "no_usage"  // serve normally but send no usage chunk, even when asked for one
	FaultBadUsage  = "bad_usage" // serve normally but report 50× the tokens streamed in usage
)

// Faults lists the valid --fault values.
var Faults = []string{FaultHTTP500, FaultHTTP429, FaultMalformed, FaultTruncate, FaultHang, FaultEmpty, FaultNoUsage, FaultBadUsage}

// pickFault is the fault of the next completion request: the configured
// one for every FaultEvery-th request (every request when FaultEvery ≤ 1),
// else none.
func (e *Engine) pickFault() string {
	if e.cfg.Fault == FaultNone {
		return FaultNone
	}
	if k := int64(e.cfg.FaultEvery); k > 1 && e.faultSeq.Add(1)%k != 0 {
		return FaultNone
	}
	return e.cfg.Fault
}

// injectFault answers r with fault and reports whether it did (false:
// serve the request normally, with what the fault changes in its stream).
func (e *Engine) injectFault(w http.ResponseWriter, r *http.Request, fault string) bool {
	switch fault {
	case FaultHTTP500:
		(&apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: "simulated engine failure (--fault http500)"}).write(w)
	case FaultHTTP429:
		(&apiError{status: http.StatusTooManyRequests, typ: "TooManyRequests", msg: "simulated rate limit (--fault http429)"}).write(w)
	case FaultMalformed, FaultTruncate, FaultEmpty:
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		switch fault {
		case FaultMalformed:
			fmt.Fprint(w, "data: {this is not json\n\ndata: [DONE]\n\n")
		case FaultEmpty:
			fmt.Fprint(w, `data: {"id":"cmpl-sim","object":"text_completion","choices":[{"index":0,"text":"","finish_reason":"length"}]}`+"\n\n"+
				`data: {"id":"cmpl-sim","object":"text_completion","choices":[],"usage":{"prompt_tokens":0,"total_tokens":0,"completion_tokens":0}}`+"\n\ndata: [DONE]\n\n")
		default:
			fmt.Fprint(w, `data: {"id":"cmpl-sim","object":"text_completion","choices":[{"index":0,"text":"a","finish_reason":null}]}`+"\n\n")
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	case FaultHang:
		<-r.Context().Done()
	default:
		return false
	}
	return true
}
