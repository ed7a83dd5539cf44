package probes

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"unsafe"
)

// Field indexes of one engine_step.jsonl line. The first NumTimers are the
// step timers summarized by SummarizeSteps, in TimerNames order.
const (
	FieldStepDuration = iota
	FieldSchedule
	FieldBuildMeta
	FieldExecute
	FieldUpdate
	FieldGetFinished
	FieldUnaccounted
	FieldNumRunning
	FieldNumWaiting
	FieldNumPrefillTokens
	FieldNumDecodeTokens
	FieldPID
	numFields
)

// NumTimers is the number of step timers (the first fields).
const NumTimers = FieldUnaccounted + 1

// FieldNames are the JSON names of the fields, indexed by the Field* constants.
var FieldNames = [numFields]string{
	"step_duration_us", "schedule_us", "build_meta_us", "execute_us", "update_us",
	"get_finished_us", "unaccounted_us", "num_running", "num_waiting",
	"num_prefill_tokens", "num_decode_tokens", "pid",
}

// TimerNames are the timers summarized per step, in a stable order.
var TimerNames = FieldNames[:NumTimers]

// StepRecord is one engine_step.jsonl line. A field that the line does not
// carry (or carries as null) is absent: its bit in Has is clear and its value
// is 0. Absent is not the same as measured zero.
type StepRecord struct {
	TsUs   int64              // step end, wall clock µs since the Unix epoch
	Values [numFields]float64 // indexed by the Field* constants
	Has    uint32             // bit i set when Values[i] was present
}

// Get returns field i and whether the line carried it.
func (r *StepRecord) Get(i int) (float64, bool) {
	return r.Values[i], r.Has&(1<<uint(i)) != 0
}

// fieldIndex maps a JSON key to a field; -1 for ts_us, -2 for unknown keys.
// The switch on string(key) does not allocate.
func fieldIndex(key []byte) int {
	switch string(key) {
	case "ts_us":
		return -1
	case "step_duration_us":
		return FieldStepDuration
	case "schedule_us":
		return FieldSchedule
	case "build_meta_us":
		return FieldBuildMeta
	case "execute_us":
		return FieldExecute
	case "update_us":
		return FieldUpdate
	case "get_finished_us":
		return FieldGetFinished
	case "unaccounted_us":
		return FieldUnaccounted
	case "num_running":
		return FieldNumRunning
	case "num_waiting":
		return FieldNumWaiting
	case "num_prefill_tokens":
		return FieldNumPrefillTokens
	case "num_decode_tokens":
		return FieldNumDecodeTokens
	case "pid":
		return FieldPID
	}
	return -2
}

var errNotObject = errors.New("not a JSON object")

// ParseStepLine parses one engine_step.jsonl line (without its newline) into
// rec. Unknown fields are ignored. It returns an error naming the problem
// when the line is not a JSON object, a known field is not a number, or
// ts_us or step_duration_us is missing. A hand-rolled scanner handles the
// common shape; anything unusual (escapes, nested values) goes through
// encoding/json, with the same result.
func ParseStepLine(line []byte, rec *StepRecord) error {
	return (*stepParser)(nil).parse(line, rec)
}

// stepParser remembers the key order of the previous line: loggers write
// their keys in a fixed order, so the next key is usually checked with one
// comparison instead of a scan and a lookup. A nil *stepParser learns
// nothing; the result never depends on the guesses.
type stepParser struct {
	order [24]uint8 // key k of the last line: field index + 2; 0 = unknown
	// skip marks fields whose values the caller does not read: they are
	// validated (the line must still be valid) but not converted.
	skip uint32
}

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

// parse is ParseStepLine with the parser's key-order memory.
func (p *stepParser) parse(line []byte, rec *StepRecord) error {
	if err := parseFields(p, line, rec); err != nil {
		return err
	}
	if rec.Has&(1<<FieldStepDuration) == 0 {
		return errors.New("missing step_duration_us")
	}
	return nil
}

// parseFields parses the known fields of a JSON object line and requires
// ts_us only.
func parseFields(p *stepParser, line []byte, rec *StepRecord) error {
	if p == nil {
		*rec = StepRecord{}
	} else { // SummarizeSteps reads Values only where Has is set
		rec.TsUs, rec.Has = 0, 0
	}
	var tsSet bool
	if !scanFast(p, line, rec, &tsSet) {
		*rec = StepRecord{}
		tsSet = false
		if err := parseSlow(line, rec, &tsSet); err != nil {
			return err
		}
	}
	if !tsSet {
		return errors.New("missing ts_us")
	}
	return nil
}

// setField stores a numeric token for key index idx (or ts_us).
func setField(rec *StepRecord, tsSet *bool, idx int, tok []byte) bool {
	f, iv, isInt, ok := numValue(tok)
	if !ok {
		return false
	}
	if idx == -1 {
		if !isInt {
			if math.IsNaN(f) || f < -9.2e18 || f > 9.2e18 {
				return false
			}
			iv = int64(math.Floor(f))
		}
		rec.TsUs, *tsSet = iv, true
		return true
	}
	rec.Values[idx] = f
	rec.Has |= 1 << uint(idx)
	return true
}

// clearField records an explicit null: the field is absent.
func clearField(rec *StepRecord, tsSet *bool, idx int) {
	if idx == -1 {
		rec.TsUs, *tsSet = 0, false
		return
	}
	rec.Values[idx] = 0
	rec.Has &^= 1 << uint(idx)
}

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
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		i++
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == s {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == s {
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
			case j < len(b) && b[j] == '0':
				j++
			case idx == -2 || (p != nil && idx >= 0 && p.skip&(1<<uint(idx)) != 0):
				j = skipDigits(b, j) // validated, not converted
				idx = -2
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
		if b[i] != '}' {
			return false
		}
		return skipWS(b, i+1) == len(b)
	}
}

// parseSlow is the encoding/json path, with the fast path's semantics:
// exact key match, last duplicate wins, null means absent.
func parseSlow(line []byte, rec *StepRecord, tsSet *bool) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return err
	}
	if m == nil {
		return errNotObject
	}
	for k, raw := range m {
		idx := fieldIndex([]byte(k))
		if idx == -2 {
			continue
		}
		if string(raw) == "null" {
			clearField(rec, tsSet, idx)
			continue
		}
		if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) ||
			!setField(rec, tsSet, idx, raw) {
			return fmt.Errorf("field %s: not a number: %.40s", k, raw)
		}
	}
	return nil
}
