package plan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Round is one round of a capacity search as planned, recorded in
// sweep.json (capacity_rounds) before any of its runs starts: the probes it
// runs and, per block, the block's workload seed and the seeded order of the
// probes' cells. A resumed search replans every round from the journal and
// checks it against this record (RoundDiff), so the design on record is the
// design that ran.
type Round struct {
	Round  int     `json:"round"`
	Probes []Probe `json:"probes"`
	Blocks []Block `json:"blocks"`
}

// Probe is one probed rate of a round: the cell that runs config at rate
// with shape.
type Probe struct {
	Cell   string  `json:"cell"`
	Config string  `json:"config"`
	Shape  string  `json:"shape"`
	Rate   float64 `json:"rate"`
}

// RoundOf is round k (from 1) of the given probes, each run once in blocks
// 1..blocks in the orders CapacityOrder gives.
func RoundOf(k int, probes []Probe, blocks int, seed int64, randomize bool) Round {
	rec := Round{Round: k}
	sorted := slices.Clone(probes)
	slices.SortFunc(sorted, func(x, y Probe) int {
		return strings.Compare(x.Config+"\x00"+x.Shape, y.Config+"\x00"+y.Shape)
	})
	rec.Probes = append(rec.Probes, sorted...)
	if len(probes) == 0 {
		return rec
	}
	ids := make([]string, len(probes))
	for i, p := range probes {
		ids[i] = p.Cell
	}
	for b := 1; b <= blocks; b++ {
		rec.Blocks = append(rec.Blocks, Block{Block: b, Seed: BlockSeed(seed, b), Order: CapacityOrder(seed, b, ids, randomize)})
	}
	return rec
}

// CapacityOrder is the order of a round's probe cells in block b: a
// permutation seeded by the sweep seed, the block and the round's cells (so a
// resumed sweep runs a round's remaining probes in the order it planned).
func CapacityOrder(seed int64, b int, cells []string, randomize bool) []string {
	out := slices.Clone(cells)
	slices.Sort(out)
	if !randomize {
		return out
	}
	h := hashStrings(append([]string{"mbench/capacity-order", strconv.Itoa(b)}, out...))
	perm := seededRand(derive("mbench/capacity-order/", seed, h)).Perm(len(out))
	shuffled := make([]string, len(out))
	for i, j := range perm {
		shuffled[i] = out[j]
	}
	return shuffled
}

// hashStrings hashes parts into a non-negative int64.
func hashStrings(parts []string) int64 {
	var h uint64 = 14695981039346656037 // FNV-1a
	for _, p := range parts {
		for i := 0; i < len(p); i++ {
			h ^= uint64(p[i])
			h *= 1099511628211
		}
		h ^= 0xff
		h *= 1099511628211
	}
	return int64(h >> 1)
}

// RoundDiff says how planned differs from recorded, "" when it does not.
func RoundDiff(recorded, planned Round) string {
	probes := func(r Round) string {
		if len(r.Probes) == 0 {
			return "none (the search ends)"
		}
		var parts []string
		for _, p := range r.Probes {
			parts = append(parts, fmt.Sprintf("%s %s@%g", p.Config, p.Shape, p.Rate))
		}
		return strings.Join(parts, ", ")
	}
	if a, b := probes(recorded), probes(planned); a != b || !slices.Equal(probeCells(recorded), probeCells(planned)) {
		return fmt.Sprintf("recorded probes %s; replanned %s", a, b)
	}
	if len(recorded.Blocks) != len(planned.Blocks) {
		return fmt.Sprintf("recorded %d blocks, replanned %d", len(recorded.Blocks), len(planned.Blocks))
	}
	for i, rb := range recorded.Blocks {
		pb := planned.Blocks[i]
		if rb.Block != pb.Block || rb.Seed != pb.Seed || !slices.Equal(rb.Order, pb.Order) {
			return fmt.Sprintf("block %d: recorded seed %d order %s; replanned seed %d order %s",
				rb.Block, rb.Seed, strings.Join(rb.Order, " "), pb.Seed, strings.Join(pb.Order, " "))
		}
	}
	return ""
}

// probeCells is the cell ids of r's probes, in record order.
func probeCells(r Round) []string {
	out := make([]string, len(r.Probes))
	for i, p := range r.Probes {
		out[i] = p.Cell
	}
	return out
}
