package openloop

import (
	"sync"
	"sync/atomic"
)

// memBudget caps the memory that the grown stream buffers of a run's
// requests hold, in use or idle: buffers beyond sseKeep, each counted at
// its capacity. A buffer a request is done with stays counted and goes to
// the budget's free list; the next request that needs one as large takes
// it. Left to the garbage collector instead, the buffers of requests that
// had finished piled up until the heap reached twice what was live (380–420
// MiB of RSS for a 176 MiB peak of 15 MB lines), so the cap bounded the
// bytes counted, not the process. An idle buffer too small for a request is
// dropped when the budget needs its room.
type memBudget struct {
	limit int64
	used  atomic.Int64 // counted: in use and idle
	peak  atomic.Int64

	mu   sync.Mutex
	free [][]byte // idle buffers, counted
	idle int64    // their capacity
}

// DefaultStreamMemory is the default Config.StreamMemory.
const DefaultStreamMemory = 256 << 20

// take counts n more bytes, if the limit allows.
func (b *memBudget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			for p := b.peak.Load(); u+n > p && !b.peak.CompareAndSwap(p, u+n); p = b.peak.Load() {
			}
			return true
		}
	}
}

// get returns an empty buffer of capacity ≥ n, counted: the smallest idle
// one that is large enough, else a new one, for which idle buffers (all too
// small) are dropped, largest first, as far as the limit needs; nil when
// the limit cannot hold it.
func (b *memBudget) get(n int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	best := -1
	for i, f := range b.free {
		if cap(f) >= n && (best < 0 || cap(f) < cap(b.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		return b.unfree(best)[:0]
	}
	for !b.take(int64(n)) {
		if len(b.free) == 0 {
			return nil
		}
		big := 0
		for i, f := range b.free {
			if cap(f) > cap(b.free[big]) {
				big = i
			}
		}
		b.used.Add(-int64(cap(b.unfree(big))))
	}
	return make([]byte, 0, n)
}

// unfree removes free[i] from the free list (b.mu held) and returns it.
func (b *memBudget) unfree(i int) []byte {
	f := b.free[i]
	last := len(b.free) - 1
	b.free[i], b.free[last] = b.free[last], nil
	b.free = b.free[:last]
	b.idle -= int64(cap(f))
	return f
}

// put returns a counted buffer that a request is done with.
func (b *memBudget) put(buf []byte) {
	b.mu.Lock()
	b.free = append(b.free, buf[:0])
	b.idle += int64(cap(buf))
	b.mu.Unlock()
}
