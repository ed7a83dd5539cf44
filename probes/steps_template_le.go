//go:build amd64 || arm64

package probes

import (
	"math/bits"
	"unsafe"
)

// scanTemplate is the fastest path: a line written exactly like the
// previous one, `{"k1":int,"k2":int,...}` with the same keys in the same
// order, no whitespace and only plain non-negative integers. Any deviation
// returns false (rec may be partly written) and the caller tries scanFast.
// Every byte is still validated: a line it accepts is valid JSON with the
// values scanFast would give.
//
// It reads eight bytes at a time with unaligned little-endian loads
// (amd64, arm64), each after a bounds check of its own.
func (p *stepParser) scanTemplate(b []byte, rec *StepRecord, tsSet *bool) bool {
	n := len(b)
	if p == nil || p.nkeys == 0 || n < 2 || b[0] != '{' || b[n-1] != '}' {
		return false
	}
	base := unsafe.Pointer(unsafe.SliceData(b))
	load := func(off int) uint64 { return *(*uint64)(unsafe.Add(base, off)) }
	i := 1
	for k := 0; k < p.nkeys && k < len(p.pats); k++ {
		kp := &p.pats[k]
		// `"name":`: the quote, then up to three masked word compares.
		if n-i < 1+kp.n || b[i] != '"' {
			return false
		}
		at := i + 1
		if n-at < 8*kp.nw { // too near the end for word loads
			if string(b[at:at+kp.n]) != kp.s {
				return false
			}
		} else if load(at)&kp.m[0] != kp.w[0] ||
			(kp.nw > 1 && load(at+8)&kp.m[1] != kp.w[1]) ||
			(kp.nw > 2 && load(at+16)&kp.m[2] != kp.w[2]) {
			return false
		}
		i = at + kp.n
		// A non-negative integer, eight digits per load.
		var u uint64
		start := i
		for {
			if n-i < 8 { // the line's end: byte by byte
				for i < n && b[i] >= '0' && b[i] <= '9' {
					u = u*10 + uint64(b[i]-'0')
					i++
				}
				break
			}
			v := load(i)
			d := v - 0x3030303030303030
			nd := (d | (v + 0x4646464646464646)) & 0x8080808080808080
			c := 8
			if nd != 0 {
				if c = bits.TrailingZeros64(nd) >> 3; c == 0 {
					break
				}
				d <<= 64 - 8*uint(c)
			}
			if kp.idx != -2 {
				d = (d*10 + d>>8) & 0x00FF00FF00FF00FF
				d = (d*100 + d>>16) & 0x0000FFFF0000FFFF
				d = (d*10000 + d>>32) & 0xFFFFFFFF
				u = u*uint64(pow10[c&15]) + d
			}
			i += c
			if c < 8 {
				break
			}
		}
		if nd := i - start; nd == 0 || nd > 18 || (nd > 1 && b[start] == '0') || i >= n {
			return false
		}
		if c := b[i]; c != ',' {
			if c != '}' || k != p.nkeys-1 || i != n-1 {
				return false
			}
		} else if k == p.nkeys-1 {
			return false
		}
		i++
		switch {
		case kp.idx >= 0:
			rec.Values[kp.idx&31] = float64(u)
			rec.Has |= 1 << uint(kp.idx)
		case kp.idx == -1:
			rec.TsUs, *tsSet = int64(u), true
		}
	}
	return true
}
