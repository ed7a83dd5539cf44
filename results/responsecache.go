package results

import (
	"github.com/mbench/mbench/openloop"
)

// ResponseCache is the prefix cache as the responses tell it: the sum over
// the measured requests that completed of usage.prompt_tokens_details
// .cached_tokens (the prompt tokens the engine took from its cache) over
// their prompt tokens. It is the engine's own per-request account, beside
// the /metrics counters of prefix_cache, which count every request the
// engine processed in the window.
type ResponseCache struct {
	Requests     int     `json:"requests"` // measured OK requests whose usage gave cached_tokens
	CachedTokens int64   `json:"cached_tokens"`
	PromptTokens int64   `json:"prompt_tokens"`
	HitRate      float64 `json:"hit_rate"` // CachedTokens / PromptTokens
}

// summarizeResponseCache is nil when no measured request said how much of
// its prompt was cached.
func summarizeResponseCache(recs []Record) *ResponseCache {
	var rc ResponseCache
	for i := range recs {
		r := &recs[i]
		if r.Phase != openloop.PhaseMeasure || !r.OK() || r.CachedTokens == nil {
			continue
		}
		rc.Requests++
		rc.CachedTokens += int64(*r.CachedTokens)
		rc.PromptTokens += int64(r.InputTokens)
	}
	if rc.Requests == 0 {
		return nil
	}
	if rc.PromptTokens > 0 {
		rc.HitRate = float64(rc.CachedTokens) / float64(rc.PromptTokens)
	}
	return &rc
}
