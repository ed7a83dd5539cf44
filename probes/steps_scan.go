package probes

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"unsafe"
)

// numValue converts a JSON number token. Integers of up to 18 digits are
// converted exactly without strconv.
func numValue(tok []byte) (f float64, iv int64, isInt, ok bool) {
	if len(tok) == 0 {
		return 0, 0, false, false
	}
	neg := tok[0] == '-'
	d := tok
	if neg {
		d = tok[1:]
	}
	if len(d) > 0 && len(d) <= 18 {
		var u int64
		allDigits := true
		for _, c := range d {
			if c < '0' || c > '9' {
				allDigits = false
				break
			}
			u = u*10 + int64(c-'0')
		}
		if allDigits {
			if neg {
				u = -u
			}
			return float64(u), u, true, true
		}
	}
	// unsafe.String avoids an allocation per float; the string does not
	// outlive this call (the error, which would hold it, is dropped).
	f, err := strconv.ParseFloat(unsafe.String(&tok[0], len(tok)), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, 0, false, false
	}
	return f, 0, false, true
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func skipWS(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && isWS(b[i]) {
		i++
	}
	return i
}

// plainStr marks the bytes a string may hold on the fast path (not '"',
// not '\\', not a control character).
var plainStr = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// pow10 are the powers of ten a chunk of parseDigits can shift by.
var pow10 = [9]int64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8}

// parseDigits reads the decimal digits at b[j:] eight at a time (SWAR) and
// returns their value and the offset after them. Beyond 18 digits the value
// overflows; the caller then takes the strconv path.
func parseDigits(b []byte, j int) (int64, int) {
	var u int64
	for len(b)-j >= 8 {
		v := binary.LittleEndian.Uint64(b[j:])
		d := v - 0x3030303030303030
		// High bit of each byte that is not an ASCII digit. A borrow or
		// carry only disturbs bytes after the first non-digit.
		nd := (d | (v + 0x4646464646464646)) & 0x8080808080808080
		n := 8
		if nd != 0 {
			n = bits.TrailingZeros64(nd) / 8
			if n == 0 {
				return u, j
			}
			d = (d << (64 - 8*n)) // keep the n digits, as the high bytes
		}
		d = (d*10 + (d >> 8)) & 0x00FF00FF00FF00FF
		d = (d*100 + (d >> 16)) & 0x0000FFFF0000FFFF
		d = (d*10000 + (d >> 32)) & 0xFFFFFFFF
		u = u*pow10[n] + int64(d)
		j += n
		if n < 8 {
			return u, j
		}
	}
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		u = u*10 + int64(b[j]-'0')
		j++
	}
	return u, j
}

// skipDigits returns the offset after the decimal digits at b[j:].
func skipDigits(b []byte, j int) int {
	for len(b)-j >= 8 {
		v := binary.LittleEndian.Uint64(b[j:])
		nd := ((v - 0x3030303030303030) | (v + 0x4646464646464646)) & 0x8080808080808080
		if nd != 0 {
			return j + bits.TrailingZeros64(nd)/8
		}
		j += 8
	}
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	return j
}

// someDigits is skipDigits for one or more digits: -1 when b[j] is not one.
func someDigits(b []byte, j int) int {
	if e := skipDigits(b, j); e > j {
		return e
	}
	return -1
}

// scanNumber returns the end of a strict JSON number starting at i, or -1.
func scanNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return -1
	}
	switch {
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = someDigits(b, i+1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = someDigits(b, i); i < 0 {
			return -1
		}
	}
	return i
}

// scanString returns the end (after the closing quote) of a string starting
// at the quote at i, or -1 for anything the fast path does not handle
// (escapes, control characters, an unterminated string).
func scanString(b []byte, i int) int {
	i++
	for i < len(b) && plainStr[b[i]] {
		i++
	}
	if i < len(b) && b[i] == '"' {
		return i + 1
	}
	return -1
}

func hasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// key reads the k-th key of a line, starting at its opening quote at i. It
// returns the key's field index (-1 ts_us, -2 unknown) and the offset after
// its closing quote, or ke < 0 for a key the fast path does not handle.
func (p *stepParser) key(b []byte, i, k int) (idx, ke int) {
	e := bytes.IndexByte(b[i+1:], '"')
	if e < 0 {
		return -2, -1
	}
	key := b[i+1 : i+1+e]
	idx = fieldIndex(key)
	if idx == -2 { // known names are plain; check unknown ones
		for _, c := range key {
			if !plainStr[c] {
				return -2, -1
			}
		}
	}
	if p != nil && k < len(p.order) {
		p.order[k] = uint8(idx + 2)
	}
	return idx, i + 2 + e
}

// scanFast parses the common shape of a step line: a flat object of
// numbers, plain strings, booleans and nulls. It returns false for anything
// else (including invalid JSON); the caller then uses encoding/json.
func scanFast(p *stepParser, b []byte, rec *StepRecord, tsSet *bool) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipWS(b, i+1) == len(b)
	}
	var keys [25]int8 // for the template; one more than it holds
	for k := 0; ; k++ {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		var idx int
		if p != nil && k < len(p.order) && p.order[k] != 0 && keyPats[p.order[k]-1].match(b, i+1) {
			idx = int(p.order[k]) - 2 // the previous line's k-th key, written `"name":`
			i += 1 + len(keyPats[idx+1].s)
		} else {
			var ke int
			if idx, ke = p.key(b, i, k); ke < 0 {
				return false
			}
			i = skipWS(b, ke)
			if i >= len(b) || b[i] != ':' {
				return false
			}
			i = skipWS(b, i+1)
		}
		if i >= len(b) {
			return false
		}
		if k < len(keys) {
			keys[k] = int8(idx)
		}
		switch c := b[i]; {
		case c == '-' || (c >= '0' && c <= '9'):
			// One pass for the common case, a plain integer; anything
			// else is re-scanned strictly and converted by numValue.
			j, neg := i, c == '-'
			if neg {
				j++
			}
			var u int64
			start := j
			switch {
			case idx == -2 || (p != nil && idx >= 0 && p.skip&(1<<uint(idx)) != 0):
				idx = -2 // validated, not converted
				if j < len(b) && b[j] == '0' {
					j++
				} else {
					j = skipDigits(b, j)
				}
			case j < len(b) && b[j] == '0':
				j++
			default:
				u, j = parseDigits(b, j)
			}
			if j == start || j-start > 18 || (j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E')) {
				e := scanNumber(b, i)
				if e < 0 {
					return false
				}
				if idx != -2 && !setField(rec, tsSet, idx, b[i:e]) {
					return false
				}
				i = e
				break
			}
			if neg {
				u = -u
			}
			switch {
			case idx >= 0:
				rec.Values[idx] = float64(u)
				rec.Has |= 1 << uint(idx)
			case idx == -1:
				rec.TsUs, *tsSet = u, true
			}
			i = j
		case c == '"':
			if idx != -2 { // a known field must be a number: let the slow path say so
				return false
			}
			if i = scanString(b, i); i < 0 {
				return false
			}
		case c == 'n' && hasLiteral(b, i, "null"):
			if idx != -2 {
				clearField(rec, tsSet, idx)
			}
			i += 4
		case idx == -2 && c == 't' && hasLiteral(b, i, "true"):
			i += 4
		case idx == -2 && c == 'f' && hasLiteral(b, i, "false"):
			i += 5
		default:
			return false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return false
		}
		if b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		if b[i] != '}' || skipWS(b, i+1) != len(b) {
			return false
		}
		p.learn(keys[:min(k+1, len(keys))])
		return true
	}
}
