//go:build amd64 || arm64

package probes

import (
	"math/bits"
	"unsafe"
)

// scanTemplate is the fastest path: a line written exactly like the
// previous one, `{"k1":num,"k2":num,...}` with the same keys in the same
// order, no whitespace and only plain non-negative numbers without an
// exponent (`12`, `3104.562`). Any deviation
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
		// `"name":`: the quote, then up to three masked word compares. A
		// key that does not match is skipped if optional.
		at := i + 1
		if n-i < 1+kp.n || b[i] != '"' {
			if kp.opt {
				continue
			}
			return false
		}
		if n-at < 8*kp.nw { // too near the end for word loads
			if string(b[at:at+kp.n]) != kp.s {
				if kp.opt {
					continue
				}
				return false
			}
		} else if load(at)&kp.m[0] != kp.w[0] ||
			(kp.nw > 1 && load(at+8)&kp.m[1] != kp.w[1]) ||
			(kp.nw > 2 && load(at+16)&kp.m[2] != kp.w[2]) {
			if kp.opt {
				continue
			}
			return false
		}
		i = at + kp.n
		// A non-negative number: integer digits, optionally a fraction
		// (no exponent), eight digits per load.
		conv := kp.idx != -2
		// part 0: the integer digits; part 1: the fraction's, if any.
		var digits [2]uint64
		var count [2]int
		start := i
		for part := 0; ; part++ {
			ps := i
			var u uint64
			for { // inline: a function call here costs a fifth of the line
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
				if conv {
					d = (d*10 + d>>8) & 0x00FF00FF00FF00FF
					d = (d*100 + d>>16) & 0x0000FFFF0000FFFF
					d = (d*10000 + d>>32) & 0xFFFFFFFF
					u = u*pow10u[c&15] + d
				}
				i += c
				if c < 8 {
					break
				}
			}
			digits[part], count[part] = u, i-ps
			if part == 1 || i >= n || b[i] != '.' {
				break
			}
			i++
		}
		u, nd, nf := digits[0], count[0], count[1]
		if nd == 0 || nd > 18 || (nd > 1 && b[start] == '0') || i >= n {
			return false
		}
		val := float64(u)
		if i-start > nd { // a fraction: '.' and nf digits
			// Up to 15 significant digits the mantissa is exact in a float64
			// and one division by an exact power of ten is correctly rounded:
			// the same value strconv.ParseFloat gives (its exact fast path).
			if nf == 0 || (conv && nd+nf > 15) {
				return false
			}
			if conv {
				val = float64(u*pow10u[nf]+digits[1]) / pow10f[nf]
			}
		}
		if c := b[i]; c != ',' {
			// The line ends: only optional keys may remain.
			if c != '}' || kp.reqAfter || i != n-1 {
				return false
			}
		} else if k == p.nkeys-1 {
			return false
		}
		i++
		switch {
		case kp.idx >= 0:
			rec.Values[kp.idx&31] = val
			rec.Has |= 1 << uint(kp.idx)
		case kp.idx == -1:
			if val != float64(u) { // a fractional ts_us: scanFast floors it
				return false
			}
			rec.TsUs, *tsSet = int64(u), true
		}
		if i == n { // the closing brace was consumed
			return true
		}
	}
	return false // keys left over that the template does not hold
}

// Powers of ten for a fraction of up to 15 digits (and the 8-digit chunks).
var (
	pow10u = [16]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}
	pow10f = [16]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}
)
