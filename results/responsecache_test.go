package results

import (
	"testing"

	"github.com/mbench/mbench/openloop"
)

// TestResponseCache sums cached_tokens over the prompt tokens of the
// measured requests that completed and said it; other phases, failures
// and requests without the field do not count.
func TestResponseCache(t *testing.T) {
	n := func(v int) *int { return &v }
	recs := []Record{
		{Phase: openloop.PhaseMeasure, Status: openloop.StatusOK, InputTokens: 256, CachedTokens: n(192)},
		{Phase: openloop.PhaseMeasure, Status: openloop.StatusOK, InputTokens: 256, CachedTokens: n(0)},
		{Phase: openloop.PhaseMeasure, Status: openloop.StatusOK, InputTokens: 100},                        // engine did not say
		{Phase: openloop.PhaseMeasure, Status: openloop.StatusError, InputTokens: 256, CachedTokens: n(9)}, // failed
		{Phase: openloop.PhaseWarmup, Status: openloop.StatusOK, InputTokens: 256, CachedTokens: n(255)},
	}
	rc := summarizeResponseCache(recs)
	if rc == nil || *rc != (ResponseCache{Requests: 2, CachedTokens: 192, PromptTokens: 512, HitRate: 0.375}) {
		t.Errorf("response cache %+v", rc)
	}
	if rc := summarizeResponseCache(recs[2:3]); rc != nil {
		t.Errorf("no request said its cached tokens, got %+v", rc)
	}
}
