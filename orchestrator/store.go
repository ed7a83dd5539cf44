package orchestrator

import (
	"fmt"
	"slices"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/internal/plan"
	"github.com/mbench/mbench/results"
)

// store is a sweep's results directory as the sweep keeps it: sweep.json
// (the plan, the fingerprint, the stop), the journal of finished runs and
// the ledger replayed from it, the metric values read from the runs'
// summaries, the matrix copy and the check of journaled runs on resume. It
// records what it is told and decides nothing; it owns the on-disk types
// (state.go).
type store struct {
	dir    string
	state  *SweepState
	ledger *ledger
	values runValues
}

// save writes sweep.json.
func (st *store) save() error { return writeSweep(st.dir, st.state) }

// openJournal replays the journal (repairing a line torn by a crash) into
// the ledger.
func (st *store) openJournal(failLimit int) error {
	led, err := openLedger(st.dir, failLimit)
	if err != nil {
		return err
	}
	st.ledger = led
	return nil
}

// recordedBlock is block b as sweep.json records it, nil when it is not
// planned yet.
func (st *store) recordedBlock(b int) *plan.Block {
	if i := slices.IndexFunc(st.state.Blocks, func(blk plan.Block) bool { return blk.Block == b }); i >= 0 {
		return &st.state.Blocks[i]
	}
	return nil
}

// recordBlock records a planned block, and the design's balance with it,
// before any of its runs start.
func (st *store) recordBlock(blk plan.Block) (*plan.Block, error) {
	st.state.Blocks = append(st.state.Blocks, blk)
	st.state.Design = plan.DesignOf(len(st.state.Cells), st.state.Randomize, st.state.Blocks)
	if err := st.save(); err != nil {
		return nil, err
	}
	return &st.state.Blocks[len(st.state.Blocks)-1], nil
}

// plannedRuns is the number of runs the progress bar expects: the recorded
// blocks' runs plus a full block for each block repeat.min still asks for.
func (st *store) plannedRuns(minBlocks int) int {
	n := 0
	for _, b := range st.state.Blocks {
		n += len(b.Order)
	}
	if more := minBlocks - len(st.state.Blocks); more > 0 {
		n += more * len(st.state.Cells)
	}
	return n
}

// planView is what the plan reads after done complete blocks: the method,
// the cells, the clock, the cells given up, the primary metric of every
// usable run (read once per run, then kept) and every run's position in its
// block.
func (st *store) planView(rep matrices.Repeat, baseline string, failLimit, done int) plan.View {
	v := plan.View{Repeat: rep, Baseline: baseline, Seed: st.state.Seed, Randomize: st.state.Randomize,
		Stage1: st.state.Stage1, Done: done, Elapsed: time.Since(st.state.Created), FailLimit: failLimit,
		Dead: map[string]bool{}, Values: map[string]map[int]float64{}, Positions: map[string]map[int]int{}}
	v.Cells = st.state.Cells
	for _, b := range st.state.Blocks { // positions as export reads them (exportSweep)
		for i, id := range b.Order {
			if v.Positions[id] == nil {
				v.Positions[id] = map[int]int{}
			}
			v.Positions[id][b.Block] = i + 1
		}
	}
	for id := range st.ledger.dead {
		v.Dead[id] = true
	}
	for k, e := range st.ledger.runs {
		if !e.Status.Usable() {
			continue
		}
		if x, ok := st.values.get(st.dir, e, rep.Metric); ok {
			if v.Values[k.cell] == nil {
				v.Values[k.cell] = map[int]float64{}
			}
			v.Values[k.cell][k.block] = x
		}
	}
	return v
}

// recordStop records why the sweep stopped and how close it came.
func (st *store) recordStop(rec *StopRecord) error {
	st.state.Stop = rec
	return st.save()
}

// addCells adds cells (a capacity round's new probes) to sweep.json's
// cells; it reports whether any was new. The caller saves before any of
// their runs starts, so that export and resume know them.
func (st *store) addCells(cells []matrices.Cell) bool {
	known := map[string]bool{}
	for _, c := range st.state.Cells {
		known[c.ID] = true
	}
	added := false
	for _, c := range cells {
		if !known[c.ID] {
			st.state.Cells = append(st.state.Cells, c.CellInfo)
			known[c.ID], added = true, true
		}
	}
	return added
}

// recordRound checks a planned capacity round against sweep.json's record
// of it (a resumed search) or appends it (a new round; an empty round, the
// end of the search, is not recorded). A planned round that differs from
// its record is an error: a run's summary changed since, or the planner
// did, and the search would mix two designs; with force the record is
// replaced from that round on, and replaced says how it differed. It
// reports whether the state changed.
func (st *store) recordRound(rec plan.Round, force bool) (changed bool, replaced string, err error) {
	if i := rec.Round - 1; i < len(st.state.CapacityRounds) {
		diff := plan.RoundDiff(st.state.CapacityRounds[i], rec)
		if diff == "" {
			return false, "", nil
		}
		if !force {
			return false, "", fmt.Errorf("%w: round %d: %s; refusing to mix two designs (resume --force replaces the recorded rounds from %d on)", errCapacityReplay, rec.Round, diff, rec.Round)
		}
		replaced = diff
		st.state.CapacityRounds = st.state.CapacityRounds[:i]
		if len(rec.Probes) == 0 {
			return true, replaced, nil
		}
	}
	if len(rec.Probes) == 0 {
		return false, replaced, nil
	}
	st.state.CapacityRounds = append(st.state.CapacityRounds, rec)
	return true, replaced, nil
}

// verdicts counts the journaled runs of the given cells by verdict.
func (st *store) verdicts(cells map[string]matrices.Cell) results.VerdictCounts {
	vc := results.VerdictCounts{}
	for k, e := range st.ledger.runs {
		if _, ok := cells[k.cell]; ok {
			vc[e.Status]++
		}
	}
	return vc
}
