package plan

import (
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"slices"
)

// Block is one planned block, recorded in sweep.json before any of its runs
// starts: its workload seed and the order its cells run in.
type Block struct {
	Block int      `json:"block"`
	Seed  int64    `json:"seed"`
	Order []string `json:"order"`
}

// BlockSeed derives the workload seed of block b from the sweep seed. Every
// cell of a block runs with this seed, so within a block every config sees
// the same arrival schedule and prompts; across blocks the workload is
// resampled.
func BlockSeed(sweepSeed int64, block int) int64 {
	return derive("mbench/block-seed/", sweepSeed, int64(block))
}

// derive hashes a purpose, the sweep seed and an index into a seed.
func derive(purpose string, sweepSeed, index int64) int64 {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], uint64(sweepSeed))
	binary.LittleEndian.PutUint64(buf[8:], uint64(index))
	sum := sha256.Sum256(append([]byte(purpose), buf[:]...))
	return int64(binary.LittleEndian.Uint64(sum[:8]) >> 1)
}

func seededRand(seed int64) *rand.Rand {
	s := uint64(seed)
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

// DesignWilliams names the counterbalanced design of the block orders.
const DesignWilliams = "williams-reversed-pairs"

// WilliamsRow is row r of the Williams design for n treatments, the
// balanced Latin square whose first row is 0, 1, n−1, 2, n−2, … and whose
// row r adds r (mod n). For even n its n rows put every treatment in every
// position once and after every other treatment once; for odd n the 2n rows
// are the n rows and their reverses (r ≥ n is the reverse of row r−n).
func WilliamsRow(n, r int) []int {
	row := make([]int, n)
	lo, hi := 1, n-1
	for k := 1; k < n; k++ {
		if k%2 == 1 {
			row[k] = lo
			lo++
		} else {
			row[k] = hi
			hi--
		}
	}
	shift := r % n
	for k := range row {
		row[k] = (row[k] + shift) % n
	}
	if n%2 == 1 && r >= n {
		slices.Reverse(row)
	}
	return row
}

// WilliamsPeriod is the number of rows of the Williams design for n
// treatments: n for even n, 2n for odd n (1 for n ≤ 1).
func WilliamsPeriod(n int) int {
	switch {
	case n <= 1:
		return 1
	case n%2 == 0:
		return n
	default:
		return 2 * n
	}
}

// williamsPairs lists the design's rows as pairs of a row and its reverse:
// for even n row r's reverse is row r + n/2, for odd n row r + n.
func williamsPairs(n int) [][2]int {
	p := WilliamsPeriod(n)
	var out [][2]int
	for r := 0; r < p/2; r++ {
		out = append(out, [2]int{r, r + p/2})
	}
	if p == 1 {
		out = append(out, [2]int{0, 0})
	}
	return out
}

// BlockOrder returns the order in which block b (1-based) runs the given
// cells. The orders follow a Williams design (balanced Latin square) over
// the cells, taken as pairs of a row and its reverse: blocks 2k−1 and 2k run
// mirror-image orders, so after every even number of blocks each cell's mean
// position is the middle of the block and each pair of cells ran in both
// orders equally often; after a whole cycle of the square (n blocks for n
// cells, 2n for odd n) every cell has been in every position and after every
// other cell equally often. It is seeded: which cell plays which symbol of
// the square (fixed for the sweep), the order of the pairs within each cycle
// and which of a pair comes first are drawn from the sweep seed. With
// randomize false the cells run in the given order (a test-only switch that
// reproduces the ordering effect of a fixed order: the first cell on a cold
// GPU, the next on a warm one).
func BlockOrder(sweepSeed int64, block int, cells []string, randomize bool) []string {
	out := append([]string(nil), cells...)
	if !randomize || len(cells) < 2 {
		return out
	}
	n := len(cells)
	label := seededRand(derive("mbench/design-labels/", sweepSeed, int64(n))).Perm(n)
	row := williamsRowOfBlock(sweepSeed, n, block)
	for k, sym := range WilliamsRow(n, row) {
		out[k] = cells[label[sym]]
	}
	return out
}

// williamsRowOfBlock picks the square's row that block b runs.
func williamsRowOfBlock(sweepSeed int64, n, block int) int {
	pairs := williamsPairs(n)
	perCycle := 2 * len(pairs)
	i := block - 1
	cycle, within := i/perCycle, i%perCycle
	r := seededRand(derive("mbench/design-cycle/", sweepSeed, int64(cycle)))
	perm := r.Perm(len(pairs))
	flips := make([]bool, len(pairs))
	for k := range flips {
		flips[k] = r.IntN(2) == 1
	}
	p := pairs[perm[within/2]]
	first, second := p[0], p[1]
	if flips[perm[within/2]] {
		first, second = second, first
	}
	if within%2 == 0 {
		return first
	}
	return second
}
