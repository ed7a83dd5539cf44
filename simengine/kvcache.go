package simengine

// kvCache is a paged KV cache of fixed capacity with a prefix cache, modelled
// on vLLM v1's block pool: blocks are reference counted; a full prompt block
// is registered under its chain hash; a freed block keeps its hash and stays
// hittable until the allocator evicts it. Free blocks form one LRU queue:
// allocation takes the head; freed hashed blocks join the tail (a sequence's
// blocks in reverse order, so its tail is evicted first), freed unhashed
// blocks join the head (they hold nothing worth keeping).
type kvCache struct {
	blockSize int
	n         int32
	ref       []int32
	hash      []uint64
	hashed    []bool
	prev      []int32 // free list links; index n is the sentinel
	next      []int32
	numFree   int
	cached    map[uint64]int32 // chain hash → block
}

func newKVCache(blocks, blockSize int) *kvCache {
	n := int32(blocks)
	kv := &kvCache{
		blockSize: blockSize,
		n:         n,
		ref:       make([]int32, n),
		hash:      make([]uint64, n),
		hashed:    make([]bool, n),
		prev:      make([]int32, n+1),
		next:      make([]int32, n+1),
		cached:    make(map[uint64]int32),
	}
	kv.prev[n], kv.next[n] = n, n
	for b := int32(0); b < n; b++ {
		kv.pushBack(b)
	}
	return kv
}

func (kv *kvCache) pushBack(b int32) {
	s := kv.n
	last := kv.prev[s]
	kv.next[last], kv.prev[b], kv.next[b], kv.prev[s] = b, last, s, b
	kv.numFree++
}

func (kv *kvCache) pushFront(b int32) {
	s := kv.n
	first := kv.next[s]
	kv.prev[first], kv.next[b], kv.prev[b], kv.next[s] = b, first, s, b
	kv.numFree++
}

func (kv *kvCache) unlink(b int32) {
	p, nx := kv.prev[b], kv.next[b]
	kv.next[p], kv.prev[nx] = nx, p
	kv.numFree--
}

// alloc takes the least recently used free block, evicting its prefix-cache
// entry. The caller has checked numFree.
func (kv *kvCache) alloc() int32 {
	b := kv.next[kv.n]
	kv.unlink(b)
	if kv.hashed[b] {
		if kv.cached[kv.hash[b]] == b {
			delete(kv.cached, kv.hash[b])
		}
		kv.hashed[b] = false
	}
	kv.ref[b] = 1
	return b
}

// touch takes a reference on a cached block (a prefix-cache hit).
func (kv *kvCache) touch(b int32) {
	if kv.ref[b] == 0 {
		kv.unlink(b)
	}
	kv.ref[b]++
}

// release drops one reference; a block that is no longer used joins the free
// queue, keeping its hash.
func (kv *kvCache) release(b int32) {
	kv.ref[b]--
	if kv.ref[b] > 0 {
		return
	}
	if kv.hashed[b] {
		kv.pushBack(b)
	} else {
		kv.pushFront(b)
	}
}

// register publishes a full block under its chain hash, unless another block
// already holds that hash (then this one stays an uncached duplicate).
func (kv *kvCache) register(b int32, h uint64) {
	if _, dup := kv.cached[h]; dup || kv.hashed[b] {
		return
	}
	kv.cached[h] = b
	kv.hash[b], kv.hashed[b] = h, true
}

// lookup returns the cached blocks of the longest prefix of hashes, at most
// max of them.
func (kv *kvCache) lookup(hashes []uint64, max int) []int32 {
	var hits []int32
	for i := 0; i < len(hashes) && i < max; i++ {
		b, ok := kv.cached[hashes[i]]
		if !ok {
			break
		}
		hits = append(hits, b)
	}
	return hits
}

// usage is the fraction of blocks in use (vllm:kv_cache_usage_perc).
func (kv *kvCache) usage() float64 {
	return float64(int(kv.n)-kv.numFree) / float64(kv.n)
}

// numCached is the number of blocks held in the prefix cache, in use or free.
func (kv *kvCache) numCached() int { return len(kv.cached) }

// blocksFor is the number of blocks that hold tokens tokens.
func (kv *kvCache) blocksFor(tokens int) int {
	return (tokens + kv.blockSize - 1) / kv.blockSize
}

// chainHashes hashes the full blocks of ids as a chain: each block's hash
// covers its parent's hash and its own token ids, so equal hashes mean equal
// prefixes.
func chainHashes(ids []int64, blockSize int) []uint64 {
	n := len(ids) / blockSize
	out := make([]uint64, n)
	var h uint64 = 0x6d62656e63682d73 // "mbench-s"
	for j := 0; j < n; j++ {
		x := mix64(h ^ 0x9e3779b97f4a7c15)
		for _, t := range ids[j*blockSize : (j+1)*blockSize] {
			x = (x ^ uint64(t)) * 0x100000001b3
		}
		h = mix64(x)
		out[j] = h
	}
	return out
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
