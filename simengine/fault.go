package simengine

import (
	"fmt"
	"net/http"
	"strings"
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
)

// Faults lists the valid --fault values.
var Faults = []string{FaultHTTP500, FaultHTTP429, FaultMalformed, FaultTruncate, FaultHang}

func validFault(f string) error {
	if f == FaultNone {
		return nil
	}
	for _, k := range Faults {
		if f == k {
			return nil
		}
	}
	return fmt.Errorf("fault: unknown %q, want one of %s", f, strings.Join(Faults, ", "))
}

// injectFault answers r with the configured fault and reports whether it
// did (false: serve the request normally).
func (e *Engine) injectFault(w http.ResponseWriter, r *http.Request) bool {
	switch e.cfg.Fault {
	case FaultHTTP500:
		(&apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: "simulated engine failure (--fault http500)"}).write(w)
	case FaultHTTP429:
		(&apiError{status: http.StatusTooManyRequests, typ: "TooManyRequests", msg: "simulated rate limit (--fault http429)"}).write(w)
	case FaultMalformed, FaultTruncate:
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if e.cfg.Fault == FaultMalformed {
			fmt.Fprint(w, "data: {this is not json\n\ndata: [DONE]\n\n")
		} else {
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
