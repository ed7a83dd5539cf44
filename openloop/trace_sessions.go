package openloop

import (
	"cmp"
	"fmt"
	"strconv"
)

// SessionMode says how the requests of a trace are grouped into sessions for
// sampling and statistics.
type SessionMode string

// Session modes.
const (
	// SessionsAuto groups by session_id where a request has one, else by
	// its hash-id chain (SessionsChain).
	SessionsAuto SessionMode = "auto"
	// SessionsID groups by session_id; a request without one is a session
	// of its own (the sampler's behaviour before chains were inferred).
	SessionsID SessionMode = "session_id"
	// SessionsChain groups requests that share a hash-id chain: the first
	// block that is not common to most of the trace (see CommonFrac). The
	// real Mooncake traces have no session_id; their turns are found this
	// way.
	SessionsChain SessionMode = "hash_chain"
)

// ParseSessionMode validates a session mode name; "" is SessionsAuto.
func ParseSessionMode(s string) (SessionMode, error) {
	switch m := SessionMode(s); m {
	case "":
		return SessionsAuto, nil
	case SessionsAuto, SessionsID, SessionsChain:
		return m, nil
	}
	return "", fmt.Errorf("sessions: %q is not one of auto, session_id, hash_chain", s)
}

// groupingOptions validates a session mode and common fraction and fills
// their defaults.
func groupingOptions(m SessionMode, frac float64) (SessionMode, float64, error) {
	mode, err := ParseSessionMode(string(m))
	if err != nil {
		return "", 0, err
	}
	if frac = cmp.Or(frac, DefaultCommonFrac); frac < MinCommonFrac || frac > 1 {
		return "", 0, fmt.Errorf("common fraction: must be in [%v, 1], got %v", MinCommonFrac, frac)
	}
	return mode, frac, nil
}

// DefaultCommonFrac is the share of a trace's requests that a hash id must
// appear in to count as common (a system prompt, the block "0" that every
// line of Mooncake's conversation trace starts with) rather than as the mark
// of a session.
const DefaultCommonFrac = 0.5

// commonDepth bounds the leading positions where common ids are counted. A
// Mooncake hash id names its whole prefix (a chain hash), so an id shared by
// most requests sits in the same leading position in all of them.
const commonDepth = 8

// leadCounter finds the common ids in the leading positions of a trace's
// requests in two passes of bounded memory, whatever the trace's size: the
// first (add) keeps candidates with the Misra–Gries summary — any id in at
// least 1/(leadSlots+1) of the leading ids is among them — and the second
// (verify) counts the candidates exactly.
type leadCounter struct {
	n, items int
	cand     map[int64]int // the summary, then exact counts of the candidates
	verified bool
}

// leadSlots bounds the candidates; with commonDepth 8 it finds every id in
// more than 8/(leadSlots+1) < 1% of the requests (MinCommonFrac).
const leadSlots = 1024

// MinCommonFrac is the smallest common fraction the sampler accepts.
const MinCommonFrac = 0.01

// add feeds tr's leading ids to the summary (first pass).
func (c *leadCounter) add(tr *TraceRequest) {
	c.n++
	for _, h := range tr.HashIDs[:min(len(tr.HashIDs), commonDepth)] {
		c.items++
		if _, ok := c.cand[h]; ok || len(c.cand) < leadSlots {
			c.cand[h]++
			continue
		}
		for k, v := range c.cand { // decrement all: amortized O(1) per item
			if v == 1 {
				delete(c.cand, k)
			} else {
				c.cand[k] = v - 1
			}
		}
	}
}

// startVerify zeroes the candidates' counts for the second pass.
func (c *leadCounter) startVerify() {
	for k := range c.cand {
		c.cand[k] = 0
	}
	c.verified = true
}

// verify counts tr's leading ids that are candidates (second pass).
func (c *leadCounter) verify(tr *TraceRequest) {
	for _, h := range tr.HashIDs[:min(len(tr.HashIDs), commonDepth)] {
		if _, ok := c.cand[h]; ok {
			c.cand[h]++
		}
	}
}

// common returns the ids found in at least frac of the requests (after
// verify).
func (c *leadCounter) common(frac float64) map[int64]bool {
	out := map[int64]bool{}
	for h, k := range c.cand {
		if c.verified && float64(k) >= frac*float64(c.n) && c.n > 1 {
			out[h] = true
		}
	}
	return out
}

// sessionGrouper assigns each request its session key under a mode.
type sessionGrouper struct {
	mode   SessionMode
	common map[int64]bool
}

// key returns the session key of tr and whether it came from a hash chain
// (the request has no session_id of its own in the mode used).
func (g *sessionGrouper) key(tr *TraceRequest) (key string, chain bool) {
	if tr.SessionID != "" && g.mode != SessionsChain {
		return "s:" + tr.SessionID, false
	}
	if g.mode == SessionsID {
		return "line:" + strconv.Itoa(tr.Line), false
	}
	for _, h := range tr.HashIDs {
		if !g.common[h] {
			return "h:" + strconv.FormatInt(h, 10), true
		}
	}
	return "line:" + strconv.Itoa(tr.Line), false
}

// chainSessionID is the session_id the sampler writes on a request whose
// session was inferred from its hash chain.
func chainSessionID(key string) string { return "chain-" + key[len("h:"):] }

// traceSessions is how a trace's requests group into sessions.
type traceSessions struct {
	g        *sessionGrouper
	keys     []string       // in order of first appearance
	sizes    map[string]int // requests per session
	requests int
	full     *idealCache // the trace's, in file order
}

// findSessions groups the requests of the trace that pass reads (from its
// start each time) into sessions, in three passes: candidate common
// leading ids (and the trace's ideal hit rate), their exact counts, then
// each session's size.
func findSessions(pass func(func(*TraceRequest, []byte) error) error, mode SessionMode, frac float64) (*traceSessions, error) {
	lead, ss := &leadCounter{cand: map[int64]int{}}, &traceSessions{sizes: map[string]int{}, full: &idealCache{}}
	err := pass(func(tr *TraceRequest, _ []byte) error {
		lead.add(tr)
		ss.full.add(tr)
		return nil
	})
	if err != nil {
		return nil, err
	}
	lead.startVerify()
	if err := pass(func(tr *TraceRequest, _ []byte) error { lead.verify(tr); return nil }); err != nil {
		return nil, err
	}
	ss.g, ss.requests = &sessionGrouper{mode: mode, common: lead.common(frac)}, lead.n
	err = pass(func(tr *TraceRequest, _ []byte) error {
		k, _ := ss.g.key(tr)
		if _, seen := ss.sizes[k]; !seen {
			ss.keys = append(ss.keys, k)
		}
		ss.sizes[k]++
		return nil
	})
	return ss, err
}

// blockSet is a set of hash ids: a bitmap for the dense non-negative ids real
// traces use, a map for the rest, so a multi-million-line trace's distinct
// blocks fit in megabytes.
type blockSet struct {
	bits  []uint64
	other map[int64]struct{}
}

// bitmapLimit bounds the ids kept in the bitmap (512 MiB of bits at most).
const bitmapLimit = 1 << 32

// addSeen adds h and reports whether it was already present.
func (s *blockSet) addSeen(h int64) bool {
	if h >= 0 && h < bitmapLimit {
		w, b := int(h>>6), uint64(1)<<(h&63)
		if w >= len(s.bits) {
			s.bits = append(s.bits, make([]uint64, w+1-len(s.bits)+len(s.bits)/2)...)
		}
		seen := s.bits[w]&b != 0
		s.bits[w] |= b
		return seen
	}
	if s.other == nil {
		s.other = map[int64]struct{}{}
	}
	_, seen := s.other[h]
	s.other[h] = struct{}{}
	return seen
}

func (s *blockSet) has(h int64) bool {
	if h >= 0 && h < bitmapLimit {
		w := int(h >> 6)
		return w < len(s.bits) && s.bits[w]&(uint64(1)<<(h&63)) != 0
	}
	_, ok := s.other[h]
	return ok
}

// idealCache computes the prefix-cache hit rate of an infinite cache over
// requests in trace order: a request hits its leading blocks seen before, up
// to its first unseen one (prefix caching stops at the first miss). Rates
// are over hash-id blocks, the trace's own unit.
type idealCache struct {
	seen blockSet
	hitCount
}

func (c *idealCache) add(tr *TraceRequest) {
	prefix := true
	for _, h := range tr.HashIDs {
		if prefix && c.seen.has(h) {
			c.hits++
		} else {
			prefix = false
			c.seen.addSeen(h)
		}
	}
	c.blocks += int64(len(tr.HashIDs))
}

// hitCount counts the blocks a prefix cache was asked for and those it
// held.
type hitCount struct{ hits, blocks int64 }

// rate is hits/blocks, 0 without blocks.
func (c *hitCount) rate() float64 {
	if c.blocks == 0 {
		return 0
	}
	return float64(c.hits) / float64(c.blocks)
}

// IdealNewTokens returns, for each request a replay of reqs under t sends
// (indexed by request id: timestamp order, the first RequestLimit, as the
// replay numbers them), the prompt tokens an ideal prefix cache would not
// hold: one of infinite size that has seen every earlier request of the
// replay, hitting a request's leading hash-id blocks seen before (never its
// last token). It is a property of the trace, the same under every
// config, whatever instance a request went to.
func IdealNewTokens(reqs []TraceRequest, t Trace) ([]int, error) {
	p, err := newTracePlan(reqs, t, 1)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(p.items))
	c := &idealCache{}
	for i, it := range p.items {
		before := c.hits
		c.add(it.req)
		cached := min(int(c.hits-before)*TraceBlockTokens, it.req.InputLength-1)
		out[i] = it.req.InputLength - max(cached, 0)
	}
	return out, nil
}
