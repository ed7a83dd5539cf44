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
// pattern) and there are at most len(pats) of them.
func (p *stepParser) learn(keys []int8) {
	if p == nil {
		return
	}
	p.nkeys = 0
	if len(keys) > len(p.pats) {
		return
	}
	for k, idx := range keys {
		if idx == -2 {
			p.nkeys = 0
			return
		}
		pat := keyPats[idx+1]
		p.pats[k] = tmplKey{w: pat.w, m: pat.m, nw: pat.nw, n: len(pat.s), s: pat.s, idx: int(idx)}
		if p.skip&(1<<uint(max(idx, 0))) != 0 && idx >= 0 {
			p.pats[k].idx = -2 // validated, not converted
		}
	}
	p.nkeys = len(keys)
}

// tmplKey is one key of the template line.
type tmplKey struct {
	w, m  [3]uint64
	nw, n int
	s     string // `name":`
	idx   int    // field index, -1 ts_us, -2 skipped
}
