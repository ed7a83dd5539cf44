package router

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
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
	Reason          string    `json:"reason"`
	Pinned          int       `json:"pinned"` // the session's instance before this request, -1 none
	Class           Class     `json:"class"`
	PromptTokens    int       `json:"prompt_tokens"`
	CachedTokens    int       `json:"cached_tokens_est"` // on the prefill instance, by the router's index
	NewTokens       int       `json:"new_tokens_est"`
	PrefillNew      int       `json:"prefill_new_tokens_est"` // computed by the prefill instance
	Loads           []int     `json:"loads"`                  // requests in flight per instance when it was routed
	Scores          []float64 `json:"scores,omitempty"`
	StartUnixUs     int64     `json:"start_unix_us"`
	PrefillMs       float64   `json:"prefill_ms,omitempty"`    // remote prefill done
	FirstByteMs     float64   `json:"first_byte_ms,omitempty"` // first bytes of the answer
	DoneMs          float64   `json:"done_ms"`
	Status          int       `json:"status"`
	Error           string    `json:"error,omitempty"`
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
		Instance: d.Decode, InstanceURL: r.URL(d.Decode), PrefillInstance: d.Prefill, Reason: d.Reason,
		Pinned: d.Pinned, Class: d.Class, PromptTokens: d.PromptTokens, CachedTokens: d.CachedTokens,
		NewTokens: d.NewTokens, PrefillNew: d.PrefillNewTokens, Loads: d.Loads, Scores: d.Scores, StartUnixUs: t.UnixMicro()}
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
	return append([]Entry(nil), l.entries...)
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
	Offloaded  int                      `json:"offloaded"`       // prefills run off the serving instance
	EstHitRate float64                  `json:"est_hit_rate"`    // router-estimated cached / prompt tokens
	InFlight   []int                    `json:"in_flight_now"`   // per instance, at the time of the call
	Offloads   int                      `json:"offloads_in_now"` // offloaded prefills in flight now
}

// ClassBreakdown counts one request class.
type ClassBreakdown struct {
	Requests    int     `json:"requests"`
	Offloaded   int     `json:"offloaded"`
	MeanFirstMs float64 `json:"mean_first_byte_ms"`
}

// InstanceBreakdown counts one instance's share.
type InstanceBreakdown struct {
	URL          string `json:"url"`
	Served       int    `json:"served"`        // responses served (decodes)
	Prefills     int    `json:"prefills"`      // prefills run here
	PrefillsIn   int    `json:"prefills_in"`   // prefills run here for another instance
	PromptTokens int64  `json:"prompt_tokens"` // of the prefills run here
	EstCached    int64  `json:"est_cached_tokens"`
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
		if e.Status != http.StatusOK {
			b.Failed++
		}
		b.Reasons[e.Reason]++
		c := b.Classes[e.Class]
		c.Requests++
		c.MeanFirstMs += (e.FirstByteMs - c.MeanFirstMs) / float64(c.Requests)
		off := e.PrefillInstance != e.Instance
		if off {
			c.Offloaded++
			b.Offloaded++
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
	}
	if prompt > 0 {
		b.EstHitRate = float64(cached) / float64(prompt)
	}
	r.mu.Lock()
	for _, in := range r.inst {
		b.InFlight = append(b.InFlight, in.inflight)
	}
	b.Offloads = r.offloads
	r.mu.Unlock()
	return b
}
