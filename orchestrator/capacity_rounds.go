package orchestrator

import (
	"errors"
	"fmt"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/internal/plan"
)

// errCapacityReplay: a resumed capacity search planned a round other than
// the one recorded.
var errCapacityReplay = errors.New("the resumed capacity search does not replay the recorded rounds")

// capacityRoundRecord is round k (from 1) of round's cells, with the orders
// capacityRound will run them in.
func (s *Sweep) capacityRoundRecord(k int, round []matrices.Cell, blocks int) plan.Round {
	probes := make([]plan.Probe, len(round))
	for i, c := range round {
		probes[i] = plan.Probe{Cell: c.ID, Config: c.Config, Shape: c.Shape.Name, Rate: c.Rate}
	}
	return plan.RoundOf(k, probes, blocks, s.state.Seed, s.state.Randomize)
}

// recordCapacityRound checks a planned round against sweep.json's record of
// it (a resumed search) or appends it (a new round; an empty round, the end
// of the search, is not recorded). A planned round that differs from its
// record is an error: a run's summary changed since, or the planner did, and
// the search would mix two designs; with Force the record is replaced from
// that round on. It reports whether s.state changed.
func (s *Sweep) recordCapacityRound(rec plan.Round) (bool, error) {
	if i := rec.Round - 1; i < len(s.state.CapacityRounds) {
		diff := plan.RoundDiff(s.state.CapacityRounds[i], rec)
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
