package plan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mbench/mbench/results"
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
// with shape, in every block, or, for a re-run (Attempt > 0), in Blocks
// only: those of an earlier attempt that gave no usable run.
type Probe struct {
	Cell    string  `json:"cell"`
	Config  string  `json:"config"`
	Shape   string  `json:"shape"`
	Rate    float64 `json:"rate"`
	Attempt int     `json:"attempt,omitempty"`
	Blocks  []int   `json:"blocks,omitempty"`
}

// runsIn reports whether p runs in block b.
func (p Probe) runsIn(b int) bool { return p.Blocks == nil || slices.Contains(p.Blocks, b) }

// RoundOf is round k (from 1) of the given probes, each run once in blocks
// 1..blocks (a re-run in its Blocks) in the orders CapacityOrder gives; a
// block none of the probes runs in is left out.
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
	for b := 1; b <= blocks; b++ {
		var ids []string
		for _, p := range probes {
			if p.runsIn(b) {
				ids = append(ids, p.Cell)
			}
		}
		if len(ids) > 0 {
			rec.Blocks = append(rec.Blocks, Block{Block: b, Seed: BlockSeed(seed, b), Order: CapacityOrder(seed, b, ids, randomize)})
		}
	}
	return rec
}

// Retry is a probe's re-run: its rate, the attempt, and the blocks of the
// earlier attempts that gave no usable run.
type Retry struct {
	Rate    float64
	Attempt int
	Blocks  []int
}

// Retries are the re-runs a search needs before the planner may trust its
// probes: for each probe, the blocks none of whose runs counted (ok or
// saturated: a failed, errored or client-limited run says nothing about
// the SLO), while they have had at most retries re-runs. Planning waits for
// them: a probe without usable data would otherwise steer the search (into
// the uncertain band) on no evidence. A block that has never run (its
// round not finished) is not a retry.
func Retries(s *results.CapacitySearch, retries int) []Retry {
	var out []Retry
	for _, p := range s.Probes {
		r := Retry{Rate: p.Rate}
		for _, c := range p.Runs {
			if !c.Counts() && c.Attempts <= retries {
				r.Blocks = append(r.Blocks, c.Block)
				r.Attempt = max(r.Attempt, c.Attempts)
			}
		}
		if len(r.Blocks) > 0 {
			out = append(out, r)
		}
	}
	return out
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
			part := fmt.Sprintf("%s %s@%g", p.Config, p.Shape, p.Rate)
			if p.Attempt > 0 {
				part += fmt.Sprintf(" (re-run %d of blocks %v)", p.Attempt, p.Blocks)
			}
			parts = append(parts, part)
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
