package orchestrator

import (
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
)

// BlockSeed derives the workload seed of block b from the sweep seed. Every
// cell of a block runs with this seed, so within a block every config sees
// the same arrival schedule and prompts; across blocks the workload is
// resampled.
func BlockSeed(sweepSeed int64, block int) int64 {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], uint64(sweepSeed))
	binary.LittleEndian.PutUint64(buf[8:], uint64(block))
	sum := sha256.Sum256(append([]byte("mbench/block-seed/"), buf[:]...))
	return int64(binary.LittleEndian.Uint64(sum[:8]) >> 1)
}

// BlockOrder returns the order in which block b runs the given cells: a
// seeded random permutation, fresh for every block. With randomize false the
// cells run in the given order (a test-only switch that reproduces seed
// 000's ordering effect).
func BlockOrder(sweepSeed int64, block int, cells []string, randomize bool) []string {
	out := append([]string(nil), cells...)
	if !randomize {
		return out
	}
	s := uint64(BlockSeed(sweepSeed, block))
	r := rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
