package orchestrator

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/internal/plan"
	"github.com/mbench/mbench/results"
)

// blocks runs block after block until the stopping rule says stop. A block
// already recorded in sweep.json (an interrupted one) is always finished
// first, in its recorded order, so pairing by block holds.
func (s *Sweep) blocks(ctx context.Context) error {
	for b := 1; ; b++ {
		blk := s.recordedBlock(b)
		if blk == nil {
			v := s.planView(b - 1)
			next, stop := plan.Next(v)
			if stop != nil {
				return s.recordStop(v, *stop)
			}
			var err error
			if blk, err = s.recordBlock(*next); err != nil {
				return err
			}
		}
		if err := s.renewAllocations(ctx); err != nil {
			return err
		}
		for _, id := range blk.Order {
			cell, ok := s.cells[id]
			if !ok {
				continue // a removed cell in an old plan
			}
			if err := s.runCell(ctx, cell, b, blk.Seed); err != nil {
				return err
			}
		}
		if err := s.endBlockAllocations(ctx, b); err != nil {
			return err
		}
	}
}

// runCell runs cell in block b unless the journal has it already or the
// cell was given up (then it journals the skip); the fixed-rate blocks and
// the capacity search's rounds both run their cells through it.
func (s *Sweep) runCell(ctx context.Context, cell matrices.Cell, b int, seed int64) error {
	if err := ctx.Err(); err != nil {
		return ErrInterrupted
	}
	if s.ledger.done(cell.ID, b) {
		return nil
	}
	if why := s.ledger.deadReason(cell.ID); why != "" {
		return s.skipDead(cell.ID, b, why)
	}
	o, err := s.runOne(ctx, cell, b, seed)
	if err != nil {
		return err
	}
	if o.gaveUp {
		s.logf("cell %s (%s rate=%g): %d consecutive failed runs; marked failed and skipped: %s", cell.ID, cell.Config, cell.Rate, s.opts.FailLimit, firstLine(o.entry.Reason))
	}
	return nil
}

func (s *Sweep) recordedBlock(b int) *plan.Block {
	for i := range s.state.Blocks {
		if s.state.Blocks[i].Block == b {
			return &s.state.Blocks[i]
		}
	}
	return nil
}

// recordBlock records a planned block in sweep.json before any of its runs
// start.
func (s *Sweep) recordBlock(blk plan.Block) (*plan.Block, error) {
	s.state.Blocks = append(s.state.Blocks, blk)
	s.state.Design = plan.DesignOf(len(s.state.Cells), s.state.Randomize, s.state.Blocks)
	if err := writeSweep(s.dir, s.state); err != nil {
		return nil, err
	}
	s.prog.grow(s.plannedRuns())
	return &s.state.Blocks[len(s.state.Blocks)-1], nil
}

// planView is what the plan reads after done complete blocks: the method,
// the cells, the clock, the cells given up and the primary metric of every
// usable run (read once per run, then kept).
func (s *Sweep) planView(done int) plan.View {
	v := plan.View{Repeat: s.m.Repeat, Baseline: s.m.Baseline, Seed: s.state.Seed, Randomize: s.state.Randomize,
		Stage1: s.state.Stage1, Done: done, Elapsed: time.Since(s.state.Created), FailLimit: s.opts.FailLimit,
		Dead: map[string]bool{}, Values: map[string]map[int]float64{}}
	for _, c := range s.state.Cells {
		v.Cells = append(v.Cells, plan.Cell{ID: c.ID, Config: c.Config, Rate: c.Rate, Shape: c.Shape, SameAs: c.SameAs})
	}
	for id := range s.ledger.dead {
		v.Dead[id] = true
	}
	for k, e := range s.ledger.runs {
		if !e.Status.Usable() {
			continue
		}
		if x, ok := s.values.get(s.dir, e, s.m.Repeat.Metric); ok {
			if v.Values[k.cell] == nil {
				v.Values[k.cell] = map[int]float64{}
			}
			v.Values[k.cell][k.block] = x
		}
	}
	return v
}

// plannedRuns is the number of runs the progress bar expects: the recorded
// blocks' runs plus a full block for each block repeat.min still asks for.
func (s *Sweep) plannedRuns() int {
	n := 0
	for _, b := range s.state.Blocks {
		n += len(b.Order)
	}
	if more := s.m.Repeat.Min - len(s.state.Blocks); more > 0 {
		n += more * len(s.state.Cells)
	}
	return n
}

// briefReason is a one-line form of a failure reason: its first line, and
// when the reason quotes a log, the log's last line (usually the cause).
func briefReason(why string) string {
	lines := strings.Split(strings.TrimSpace(why), "\n")
	first, last := strings.TrimSpace(lines[0]), strings.TrimSpace(lines[len(lines)-1])
	if len(lines) == 1 || last == "" {
		return first
	}
	return first + " … " + last
}

func (s *Sweep) skipDead(id string, b int, why string) error {
	// A partial directory an interrupted attempt left is kept, moved aside.
	if err := moveAside(filepath.Join(s.dir, "runs", id, "b"+strconv.Itoa(b))); err != nil {
		return err
	}
	now := time.Now().UTC()
	e := JournalEntry{Cell: id, Block: b, Status: results.VerdictFailed, Started: now, Finished: now,
		Reason: "skipped: the cell failed " + fmt.Sprint(s.opts.FailLimit) + " consecutive runs: " + briefReason(why)}
	if _, err := s.ledger.record(e); err != nil {
		return err
	}
	s.prog.finish("skipped (cell failed)")
	return nil
}

func (s *Sweep) cellRecord(id string) CellRecord {
	for _, c := range s.state.Cells {
		if c.ID == id {
			return c
		}
	}
	return CellRecord{}
}

func (s *Sweep) recordStop(v plan.View, stop plan.Stop) error {
	conv := plan.Converge(v)
	s.state.Stop = &StopRecord{Reason: stop.Reason, Blocks: v.Done, RelHalf: conv.RelHalf, Target: s.m.Repeat.RelCI, Metric: s.m.Repeat.Metric,
		Primary: s.m.Repeat.Metric, CompHalf: conv.CompHalf, Stage1Blocks: v.FirstStage(), Converged: conv.Converged,
		RuleStop: stop.ByRule, UnusableCompar: conv.Unusable}
	s.logf("sweep stopped: %s", strings.TrimSpace(stop.Reason))
	return writeSweep(s.dir, s.state)
}
