package router

import (
	"container/list"
	"encoding/binary"
	"hash/maphash"
)

// blockHashes returns the chain hashes of the full blocks of a token-id
// prompt: block i's hash covers tokens [0, (i+1)·size), so equal hashes mean
// equal prefixes, as in vLLM's prefix cache.
func blockHashes(seed maphash.Seed, prompt []int64, size int) []uint64 {
	out := make([]uint64, 0, len(prompt)/size)
	var h maphash.Hash
	h.SetSeed(seed)
	var prev uint64
	var buf [8]byte
	for i := 0; i+size <= len(prompt); i += size {
		h.Reset()
		binary.LittleEndian.PutUint64(buf[:], prev)
		h.Write(buf[:])
		for _, t := range prompt[i : i+size] {
			binary.LittleEndian.PutUint64(buf[:], uint64(t))
			h.Write(buf[:])
		}
		prev = h.Sum64()
		out = append(out, prev)
	}
	return out
}

// prefixIndex is the router's guess of one instance's prefix cache: the
// blocks it sent there, least recently used first out when bounded.
type prefixIndex struct {
	capacity int // 0 = unbounded
	order    *list.List
	at       map[uint64]*list.Element
}

func newPrefixIndex(capacity int) *prefixIndex {
	return &prefixIndex{capacity: capacity, order: list.New(), at: map[uint64]*list.Element{}}
}

// resize sets the index's bound (0: unbounded), forgetting the least
// recently used blocks beyond it.
func (p *prefixIndex) resize(capacity int) {
	p.capacity = capacity
	for capacity > 0 && p.order.Len() > capacity {
		e := p.order.Front()
		delete(p.at, e.Value.(uint64))
		p.order.Remove(e)
	}
}

// match returns how many leading blocks of hashes the index holds.
func (p *prefixIndex) match(hashes []uint64) int {
	n := 0
	for n < len(hashes) && p.at[hashes[n]] != nil {
		n++
	}
	return n
}

// insert records hashes as the most recently used, the first block most of
// all (an engine evicts a finished sequence's tail first).
func (p *prefixIndex) insert(hashes []uint64) {
	if p.capacity > 0 && len(hashes) > p.capacity {
		hashes = hashes[:p.capacity]
	}
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		if e := p.at[h]; e != nil {
			p.order.MoveToBack(e)
			continue
		}
		p.at[h] = p.order.PushBack(h)
		p.resize(p.capacity)
	}
}
