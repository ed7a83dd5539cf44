package probes

import "encoding/binary"

// quotedKeys holds each known key followed by its closing quote: index 0
// is ts_us, index f+1 is field f.
var quotedKeys = func() (q [numFields + 1]string) {
	q[0] = "ts_us\""
	for f, n := range FieldNames {
		q[f+1] = n + "\""
	}
	return q
}()

// keyPat is a known key with its closing quote and colon (`name":`), as
// up to three little-endian words and masks, to compare in a few loads.
type keyPat struct {
	w, m [3]uint64
	nw   int // words used
	s    string
}

var keyPats = func() (ps [numFields + 1]keyPat) {
	for i, q := range quotedKeys {
		s := q + ":"
		var buf [24]byte
		copy(buf[:], s)
		p := keyPat{s: s, nw: (len(s) + 7) / 8}
		for k := 0; k < p.nw; k++ {
			p.w[k] = binary.LittleEndian.Uint64(buf[8*k:])
			n := min(8, len(s)-8*k)
			p.m[k] = ^uint64(0) >> (64 - 8*n)
			p.w[k] &= p.m[k]
		}
		ps[i] = p
	}
	return ps
}()

// match reports whether b[at:] starts with the pattern.
func (p *keyPat) match(b []byte, at int) bool {
	if len(b)-at < 8*p.nw {
		return len(b)-at >= len(p.s) && string(b[at:at+len(p.s)]) == p.s
	}
	le := binary.LittleEndian
	switch p.nw {
	case 1:
		return le.Uint64(b[at:])&p.m[0] == p.w[0]
	case 2:
		return le.Uint64(b[at:])&p.m[0] == p.w[0] && le.Uint64(b[at+8:])&p.m[1] == p.w[1]
	default:
		return le.Uint64(b[at:])&p.m[0] == p.w[0] && le.Uint64(b[at+8:])&p.m[1] == p.w[1] &&
			le.Uint64(b[at+16:])&p.m[2] == p.w[2]
	}
}

// learn records the key order of a line that scanFast accepted, for
// scanTemplate: only when every key is known (unknown keys have no
// pattern) and distinct. A line whose keys fit the current template with
// some keys left out, or with keys the template lacks, widens it: the
// template becomes the shortest key order holding both, and a key missing
// from either becomes optional (a step line carries wait_us only when the
// engine waited, batch_queue only on that path). Keys in an order the
// template contradicts, or more than len(pats) keys, start a new template.
func (p *stepParser) learn(keys []int8) {
	if p == nil {
		return
	}
	var seen uint64
	for _, idx := range keys {
		if idx == -2 || seen&(1<<uint(idx+1)) != 0 {
			p.nkeys = 0
			return
		}
		seen |= 1 << uint(idx+1)
	}
	var line [maxTemplateKeys]tmplSlot
	for k, idx := range keys {
		if k >= len(line) {
			p.nkeys = 0
			return
		}
		line[k] = tmplSlot{idx: idx}
	}
	merged, ok := mergeKeyOrders(p.slots[:p.nkeys], line[:len(keys)])
	if !ok || len(merged) > len(p.pats) {
		merged = line[:len(keys)]
	}
	for k, sl := range merged {
		pat := keyPats[sl.idx+1]
		p.pats[k] = tmplKey{w: pat.w, m: pat.m, nw: pat.nw, n: len(pat.s), s: pat.s, idx: int(sl.idx), opt: sl.opt}
		if sl.idx >= 0 && p.skip&(1<<uint(sl.idx)) != 0 {
			p.pats[k].idx = -2 // validated, not converted
		}
		p.slots[k] = sl
	}
	p.nkeys = len(merged)
	// reqAfter[k]: some key after k is required (the line cannot end at k).
	req := false
	for k := p.nkeys - 1; k >= 0; k-- {
		p.pats[k].reqAfter = req
		req = req || !p.pats[k].opt
	}
}

// tmplSlot is one key of a template order: its field index and whether a
// line may leave it out.
type tmplSlot struct {
	idx int8
	opt bool
}

// mergeKeyOrders returns the shortest order holding both a (the template,
// possibly empty) and b (a line's keys), both of distinct keys; keys not in
// both are optional. ok is false when a and b order some keys differently.
func mergeKeyOrders(a, b []tmplSlot) (merged []tmplSlot, ok bool) {
	if len(a) == 0 {
		return b, true
	}
	// Longest common subsequence of the key indexes, then interleave.
	var lcs [maxTemplateKeys + 1][maxTemplateKeys + 1]uint8
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i].idx == b[j].idx {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var seen uint64
	push := func(s tmplSlot) bool {
		bit := uint64(1) << uint(s.idx+1)
		if seen&bit != 0 {
			return false // the orders disagree: the key would appear twice
		}
		seen |= bit
		merged = append(merged, s)
		return true
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i].idx == b[j].idx:
			if !push(tmplSlot{a[i].idx, a[i].opt}) {
				return nil, false
			}
			i, j = i+1, j+1
		case j == len(b) || (i < len(a) && lcs[i+1][j] >= lcs[i][j+1]):
			if !push(tmplSlot{a[i].idx, true}) {
				return nil, false
			}
			i++
		default:
			if !push(tmplSlot{b[j].idx, true}) {
				return nil, false
			}
			j++
		}
	}
	return merged, true
}

// tmplKey is one key of the template line.
type tmplKey struct {
	w, m  [3]uint64
	nw, n int
	s     string // `name":`
	idx   int    // field index, -1 ts_us, -2 skipped
	opt   bool   // a line may leave this key out
	// reqAfter: a required key follows, so a line cannot end here.
	reqAfter bool
}

// maxTemplateKeys bounds the keys of a template (a step line has at most
// about 20).
const maxTemplateKeys = 24
