package orchestrator

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mbench/mbench/matrices"
)

// CapacityRound is one round of a capacity search as planned, recorded in
// sweep.json (capacity_rounds) before any of its runs starts: the probes it
// runs and, per block, the block's workload seed and the seeded order of the
// probes' cells. A resumed search replans every round from the journal and
// checks it against this record (verifyRound), so the design on record is
// the design that ran.
type CapacityRound struct {
	Round  int             `json:"round"`
	Probes []CapacityProbe `json:"probes"`
	Blocks []BlockRecord   `json:"blocks"`
}

// CapacityProbe is one probed rate of a round: the cell that runs config at
// rate with shape.
type CapacityProbe struct {
	Cell   string  `json:"cell"`
	Config string  `json:"config"`
	Shape  string  `json:"shape"`
	Rate   float64 `json:"rate"`
}

// errCapacityReplay: a resumed capacity search planned a round other than
// the one recorded.
var errCapacityReplay = errors.New("the resumed capacity search does not replay the recorded rounds")

// capacityRoundRecord is round k (from 1) of round's cells, with the orders
// capacityRound will run them in.
func (s *Sweep) capacityRoundRecord(k int, round []matrices.Cell, blocks int) CapacityRound {
	rec := CapacityRound{Round: k}
	sorted := slices.Clone(round)
	slices.SortFunc(sorted, func(x, y matrices.Cell) int {
		return strings.Compare(x.Config+"\x00"+x.Shape.Name, y.Config+"\x00"+y.Shape.Name)
	})
	for _, c := range sorted {
		rec.Probes = append(rec.Probes, CapacityProbe{Cell: c.ID, Config: c.Config, Shape: c.Shape.Name, Rate: c.Rate})
	}
	if len(round) == 0 {
		return rec
	}
	for b := 1; b <= blocks; b++ {
		var ids []string
		for _, c := range capacityOrder(s.state.Seed, b, round, s.state.Randomize) {
			ids = append(ids, c.ID)
		}
		rec.Blocks = append(rec.Blocks, BlockRecord{Block: b, Seed: BlockSeed(s.state.Seed, b), Order: ids})
	}
	return rec
}

// recordCapacityRound checks a planned round against sweep.json's record of
// it (a resumed search) or appends it (a new round; an empty round, the end
// of the search, is not recorded). A planned round that differs from its
// record is an error: a run's summary changed since, or the planner did, and
// the search would mix two designs; with Force the record is replaced from
// that round on. It reports whether s.state changed.
func (s *Sweep) recordCapacityRound(rec CapacityRound) (bool, error) {
	if i := rec.Round - 1; i < len(s.state.CapacityRounds) {
		diff := roundDiff(s.state.CapacityRounds[i], rec)
		if diff == "" {
			return false, nil
		}
		if !s.opts.Force {
			return false, fmt.Errorf("%w: round %d: %s; refusing to mix two designs (resume --force replaces the recorded rounds from %d on)", errCapacityReplay, rec.Round, diff, rec.Round)
		}
		s.logf("warning: capacity round %d differs from its record (%s); --force: the recorded rounds from %d on are replaced", rec.Round, diff, rec.Round)
		s.state.CapacityRounds = s.state.CapacityRounds[:i]
		if len(rec.Probes) == 0 {
			return true, nil
		}
	}
	if len(rec.Probes) == 0 {
		return false, nil
	}
	s.state.CapacityRounds = append(s.state.CapacityRounds, rec)
	return true, nil
}

// roundDiff says how planned differs from recorded, "" when it does not.
func roundDiff(recorded, planned CapacityRound) string {
	probes := func(r CapacityRound) string {
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
func probeCells(r CapacityRound) []string {
	out := make([]string, len(r.Probes))
	for i, p := range r.Probes {
		out[i] = p.Cell
	}
	return out
}
