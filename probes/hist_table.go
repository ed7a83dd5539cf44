package probes

import "math"

// valueTable counts float64 values by their bits in an open-addressing
// (linear probing) hash table: a hit is one multiply and usually one cache
// line, where a Go map of float64 keys pays NaN-aware hashing and group
// matching. The bits 0 (the value +0) mark an empty slot; the counter never
// stores +0 here (it is a dense integer).
type valueTable struct {
	slots []tableSlot
	n     int // keys stored
	shift uint
}

type tableSlot struct {
	key   uint64
	count int64
}

const tableMinBits = 10

// add counts n more of v; v must not be +0.
func (t *valueTable) add(v float64, n int64) {
	if t.slots == nil {
		t.resize(tableMinBits)
	}
	k := math.Float64bits(v)
	mask := len(t.slots) - 1
	for i := int((k * 0x9E3779B97F4A7C15) >> t.shift); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == k {
			s.count += n
			return
		}
		if s.key == 0 {
			s.key, s.count = k, n
			t.n++
			if 2*t.n > len(t.slots) { // keep the load at most 1/2
				t.resize(64 - t.shift + 1)
			}
			return
		}
	}
}

func (t *valueTable) resize(bits uint) {
	old := t.slots
	t.slots = make([]tableSlot, 1<<bits)
	t.shift = 64 - bits
	t.n = 0
	for _, s := range old {
		if s.key != 0 {
			t.add(math.Float64frombits(s.key), s.count)
		}
	}
}

// len is the number of distinct values.
func (t *valueTable) len() int { return t.n }

// each calls f for every distinct value and its count, in no order.
func (t *valueTable) each(f func(v float64, n int64)) {
	for _, s := range t.slots {
		if s.key != 0 {
			f(math.Float64frombits(s.key), s.count)
		}
	}
}
