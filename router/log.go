package router

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Entry is one line of the routing log (routing.jsonl): where a request
// went, why, what the router estimated, and how long its phases took as the
// router saw them.
type Entry struct {
	ID              string    `json:"id,omitempty"` // X-Mbench-Id: the load generator's request id
	Session         string    `json:"session,omitempty"`
	Policy          Policy    `json:"policy"`
	Instance        int       `json:"instance"` // serves the response (decodes)
	InstanceURL     string    `json:"instance_url"`
	PrefillInstance int       `json:"prefill_instance"` // = instance unless offloaded or PD-separated
	Split           string    `json:"split,omitempty"`  // offload | pd | "" (see Decision.Split)
	Reason          string    `json:"reason"`
	Pinned          int       `json:"pinned"` // the session's instance before this request, -1 none
	Class           Class     `json:"class"`
	PromptTokens    int       `json:"prompt_tokens"`
	CachedTokens    int       `json:"cached_tokens_est"` // on the prefill instance, by the router's index
	NewTokens       int       `json:"new_tokens_est"`
	PrefillNew      int       `json:"prefill_new_tokens_est"` // computed by the prefill instance
	Loads           []int     `json:"loads"`                  // requests in flight per instance when it was routed
	EngineLoads     []int     `json:"engine_loads,omitempty"` // load engine: the engines' waiting + running (-1: not known)
	Scores          []float64 `json:"scores,omitempty"`
	StartUnixUs     int64     `json:"start_unix_us"`
	TransferID      string    `json:"transfer_id,omitempty"`    // the Mooncake protocol: the legs' shared transfer_id ("xfer-" + their X-Request-Id)
	DecodeSentMs    float64   `json:"decode_sent_ms,omitempty"` // the decode leg sent
	PrefillMs       float64   `json:"prefill_ms,omitempty"`     // remote prefill answered
	PrefillStatus   int       `json:"prefill_status,omitempty"` // its HTTP status
	PrefillError    string    `json:"prefill_error,omitempty"`
	// Recompute: the nixl protocol's prefill answered no kv_transfer_params
	// (its one token was EOS, or it has no KV connector), so the decode
	// instance computed the prompt itself.
	Recompute   bool    `json:"recompute,omitempty"`
	FirstByteMs float64 `json:"first_byte_ms,omitempty"` // first bytes of the answer
	DoneMs      float64 `json:"done_ms"`
	// EngineCachedTokens is the engine's own count of the prompt tokens it
	// did not compute (usage.prompt_tokens_details.cached_tokens), when it
	// reports it: the truth to check cached_tokens_est against.
	EngineCachedTokens *int   `json:"engine_cached_tokens,omitempty"`
	Status             int    `json:"status"`
	Error              string `json:"error,omitempty"`
}

// Log keeps the entries of finished requests since the last Reset, and
// appends every one to a file when given.
type Log struct {
	mu      sync.Mutex
	entries []Entry
	w       *bufio.Writer
}

// maxEntries bounds the entries kept in memory between resets.
const maxEntries = 1 << 20

// NewLog returns a log; w (may be nil) receives every entry as a JSON line.
func NewLog(w io.Writer) *Log {
	l := &Log{}
	if w != nil {
		l.w = bufio.NewWriter(w)
	}
	return l
}

func (l *Log) start(r *Router, d *Decision, h http.Header, t time.Time) *Entry {
	return &Entry{ID: h.Get("X-Mbench-Id"), Session: h.Get("X-Mbench-Session"), Policy: r.opt.Policy,
		Instance: d.Decode, InstanceURL: r.URL(d.Decode), PrefillInstance: d.Prefill, Split: d.Split(), Reason: d.Reason,
		Pinned: d.Pinned, Class: d.Class, PromptTokens: d.PromptTokens, CachedTokens: d.CachedTokens,
		NewTokens: d.NewTokens, PrefillNew: d.PrefillNewTokens, Loads: d.Loads, EngineLoads: d.EngineLoads, Scores: d.Scores, StartUnixUs: t.UnixMicro()}
}

func (l *Log) finish(e *Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) < maxEntries {
		l.entries = append(l.entries, *e)
	}
	if l.w != nil {
		b, _ := json.Marshal(e) // plain fields: cannot fail
		l.w.Write(append(b, '\n'))
		l.w.Flush()
	}
}

// Reset forgets the entries kept in memory (the file keeps them).
func (l *Log) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = nil
}

// Entries returns a copy of the entries kept.
func (l *Log) Entries() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// WriteEntries writes the entries kept as JSON lines.
func (l *Log) WriteEntries(w io.Writer) {
	bw := bufio.NewWriter(w)
	for _, e := range l.Entries() {
		b, _ := json.Marshal(e)
		bw.Write(append(b, '\n'))
	}
	bw.Flush()
}

// Breakdown is the router's account of the requests since the last reset,
// as GET /breakdown serves it.
type Breakdown struct {
	Policy     Policy                   `json:"policy"`
	Requests   int                      `json:"requests"`
	Failed     int                      `json:"failed"`
	Reasons    map[string]int           `json:"reasons"`
	Classes    map[Class]ClassBreakdown `json:"classes"`
	Instances  []InstanceBreakdown      `json:"instances"`
	Offloaded  int                      `json:"offloaded"`                 // elastic offloads: HEAVY prefills moved off their sticky instance
	PDSplit    int                      `json:"pd_split"`                  // PD-separated requests: prefill on a producer, decode on a consumer
	EstHitRate float64                  `json:"est_hit_rate"`              // router-estimated cached / prompt tokens
	InFlight   []int                    `json:"in_flight_now"`             // per instance, at the time of the call
	EngineLoad []int                    `json:"engine_load_now,omitempty"` // load engine: the engines' last reported waiting + running (-1: none yet)
	Offloads   int                      `json:"offloads_in_now"`           // offloaded prefills in flight now
	// CacheEstimate checks the router's cached-token estimate against the
	// engine's per-request count, where the engine reports one.
	CacheEstimate CacheEstimateCheck `json:"cache_estimate_check"`
}

// CacheEstimateCheck compares, over the served requests that one instance
// both prefilled and decoded and whose engine reported its cached tokens,
// the router's estimate (cached_tokens_est) with the engine's count — the
// router's shadow prefix index against the engine's own cache (router
// state against the engine's: an open problem of the agentic experiments). A split request is left out: its decode instance
// counts the KV it received as cached.
type CacheEstimateCheck struct {
	Requests       int     `json:"requests"`
	EstTokens      int64   `json:"est_cached_tokens"`
	EngineTokens   int64   `json:"engine_cached_tokens"`
	MeanAbsErr     float64 `json:"mean_abs_error_tokens"`
	OverEstimated  int     `json:"over_estimated"`   // the router thought more was cached than was
	UnderEstimated int     `json:"under_estimated"`  // less
	WithinBlock    int     `json:"within_one_block"` // |est − engine| ≤ the router's block size
}

// ClassBreakdown counts one request class.
type ClassBreakdown struct {
	Requests  int `json:"requests"`
	Failed    int `json:"failed"`
	Offloaded int `json:"offloaded"` // elastic offloads only
	PDSplit   int `json:"pd_split"`
	// MeanFirstMs is the mean time to the answer's first bytes over the
	// class's served requests (status 200 with a first byte); failed
	// requests have none and are not averaged in. 0 when none was served.
	MeanFirstMs float64 `json:"mean_first_byte_ms"`
	served      int
}

// InstanceBreakdown counts one instance's share.
type InstanceBreakdown struct {
	URL          string `json:"url"`
	Served       int    `json:"served"`        // responses served (decodes)
	Prefills     int    `json:"prefills"`      // prefills run here
	PrefillsIn   int    `json:"prefills_in"`   // prefills run here for another instance
	PromptTokens int64  `json:"prompt_tokens"` // of the prefills run here
	EstCached    int64  `json:"est_cached_tokens"`
	IndexBlocks  int    `json:"index_blocks"` // the bound of the router's prefix index of it (0: unbounded)
}

// Breakdown aggregates the entries kept.
func (l *Log) Breakdown(r *Router) Breakdown {
	entries := l.Entries()
	b := Breakdown{Policy: r.opt.Policy, Reasons: map[string]int{}, Classes: map[Class]ClassBreakdown{},
		Instances: make([]InstanceBreakdown, len(r.inst))}
	for i, in := range r.inst {
		b.Instances[i].URL = in.url
	}
	var prompt, cached int64
	for _, e := range entries {
		b.Requests++
		c := b.Classes[e.Class]
		c.Requests++
		if e.Status != http.StatusOK {
			b.Failed++
			c.Failed++
		} else if e.FirstByteMs > 0 {
			c.served++
			c.MeanFirstMs += (e.FirstByteMs - c.MeanFirstMs) / float64(c.served)
		}
		b.Reasons[e.Reason]++
		switch e.Split {
		case "offload":
			c.Offloaded++
			b.Offloaded++
		case "pd":
			c.PDSplit++
			b.PDSplit++
		}
		if e.PrefillInstance != e.Instance {
			b.Instances[e.PrefillInstance].PrefillsIn++
		}
		b.Classes[e.Class] = c
		b.Instances[e.Instance].Served++
		pi := &b.Instances[e.PrefillInstance]
		pi.Prefills++
		pi.PromptTokens += int64(e.PromptTokens)
		pi.EstCached += int64(e.PromptTokens - e.PrefillNew)
		prompt += int64(e.PromptTokens)
		cached += int64(e.CachedTokens)
		if e.Status == http.StatusOK && e.Split == "" && e.EngineCachedTokens != nil {
			ce := &b.CacheEstimate
			diff := e.CachedTokens - *e.EngineCachedTokens
			ce.Requests++
			ce.EstTokens += int64(e.CachedTokens)
			ce.EngineTokens += int64(*e.EngineCachedTokens)
			ce.MeanAbsErr += (math.Abs(float64(diff)) - ce.MeanAbsErr) / float64(ce.Requests)
			switch {
			case diff > 0:
				ce.OverEstimated++
			case diff < 0:
				ce.UnderEstimated++
			}
			if diff >= -r.opt.BlockTokens && diff <= r.opt.BlockTokens {
				ce.WithinBlock++
			}
		}
	}
	if prompt > 0 {
		b.EstHitRate = float64(cached) / float64(prompt)
	}
	r.mu.Lock()
	for i, in := range r.inst {
		b.InFlight = append(b.InFlight, in.inflight)
		b.Instances[i].IndexBlocks = in.index.capacity
		if r.opt.Load == LoadEngine {
			b.EngineLoad = append(b.EngineLoad, in.engineLoad)
		}
	}
	b.Offloads = r.offloads
	r.mu.Unlock()
	return b
}
