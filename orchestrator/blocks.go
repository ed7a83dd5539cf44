package orchestrator

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mbench/mbench/results"
)

// blocks runs block after block until the stopping rule says stop. A block
// already recorded in sweep.json (an interrupted one) is always finished
// first, in its recorded order, so pairing by block holds.
func (s *Sweep) blocks(ctx context.Context) error {
	for b := 1; ; b++ {
		blk := s.recordedBlock(b)
		if blk == nil {
			reason, stop := s.shouldStop(b - 1)
			if stop {
				return s.recordStop(reason, b-1)
			}
			var err error
			if blk, err = s.planBlock(b); err != nil {
				return err
			}
		}
		for _, id := range blk.Order {
			if err := ctx.Err(); err != nil {
				return ErrInterrupted
			}
			if _, done := s.journal[runKey{id, b}]; done {
				continue
			}
			cell, ok := s.cells[id]
			if !ok {
				continue // a removed cell in an old plan
			}
			if why := s.dead[id]; why != "" {
				if err := s.skipDead(id, b, why); err != nil {
					return err
				}
				continue
			}
			o, err := s.runOne(ctx, cell, b, blk.Seed)
			if err != nil {
				return err
			}
			if o.entry.Status == results.VerdictFailed && s.fails[id] >= s.opts.FailLimit {
				s.dead[id] = o.entry.Reason
				s.logf("cell %s (%s rate=%g): %d consecutive failed runs; marked failed and skipped: %s", id, cell.Config, cell.Rate, s.fails[id], firstLine(o.entry.Reason))
			}
		}
	}
}

func (s *Sweep) recordedBlock(b int) *BlockRecord {
	for i := range s.state.Blocks {
		if s.state.Blocks[i].Block == b {
			return &s.state.Blocks[i]
		}
	}
	return nil
}

// planBlock records block b in sweep.json before any of its runs start.
func (s *Sweep) planBlock(b int) (*BlockRecord, error) {
	ids := cellIDs(s.state.Cells)
	if s.m.Repeat.OnlyUnconverged && b > s.m.Repeat.Min {
		ids = s.unconvergedWithBaselines()
	}
	blk := BlockRecord{Block: b, Seed: BlockSeed(s.state.Seed, b), Order: BlockOrder(s.state.Seed, b, ids, s.state.Randomize)}
	s.state.Blocks = append(s.state.Blocks, blk)
	if err := writeSweep(s.dir, s.state); err != nil {
		return nil, err
	}
	s.prog.grow(s.plannedRuns())
	return &s.state.Blocks[len(s.state.Blocks)-1], nil
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
	if err := appendJournal(s.dir, e); err != nil {
		return err
	}
	s.journal[runKey{id, b}] = e
	s.prog.finish("skipped (cell failed)")
	return nil
}

// shouldStop applies the stopping rule after `done` complete blocks.
func (s *Sweep) shouldStop(done int) (string, bool) {
	rep := s.m.Repeat
	if done < max(rep.Min, 1) {
		return "", false
	}
	if done >= rep.Max {
		return fmt.Sprintf("reached repeat.max = %d blocks", rep.Max), true
	}
	if rep.Budget > 0 && time.Since(s.state.Created) >= rep.Budget {
		return fmt.Sprintf("time budget of %s spent after %d blocks", rep.Budget, done), true
	}
	if len(s.dead) == len(s.state.Cells) {
		return fmt.Sprintf("every cell failed %d runs in a row and was given up after %d blocks: nothing converged", s.opts.FailLimit, done), true
	}
	if len(s.unconverged()) == 0 {
		if len(s.dead) > 0 {
			return fmt.Sprintf("not converged: %d cells failed and were given up; every other cell's %s has a relative %.0f%% CI half-width ≤ %.1f%% after %d blocks",
				len(s.dead), rep.Metric, rep.Confidence*100, rep.RelCI*100, done), true
		}
		return fmt.Sprintf("converged: every cell's %s has a relative %.0f%% CI half-width ≤ %.1f%% after %d blocks",
			rep.Metric, rep.Confidence*100, rep.RelCI*100, done), true
	}
	return "", false
}

// unconverged lists cells whose metric's relative CI half-width is still
// above repeat.rel_ci (failed cells are left out: more runs will not help).
func (s *Sweep) unconverged() []string {
	var out []string
	for _, c := range s.state.Cells {
		if s.dead[c.ID] != "" {
			continue
		}
		if ok, _ := s.cellConverged(c.ID); !ok {
			out = append(out, c.ID)
		}
	}
	return out
}

func (s *Sweep) cellConverged(id string) (bool, float64) {
	vals := s.metricValues(id, s.m.Repeat.Metric)
	if len(vals) < 2 {
		return false, 0
	}
	return results.Converged(vals, s.m.Repeat.RelCI, s.m.Repeat.Confidence)
}

// metricValues reads the stopping metric of every ok or saturated run of a
// cell, in block order.
func (s *Sweep) metricValues(id, metric string) []float64 {
	var blocks []int
	for k, e := range s.journal {
		if k.cell == id && e.Status.Usable() {
			blocks = append(blocks, k.block)
		}
	}
	sort.Ints(blocks)
	var vals []float64
	for _, b := range blocks {
		e := s.journal[runKey{id, b}]
		sum, err := results.ReadRunSummary(filepath.Join(s.dir, e.Dir, "summary_A.json"))
		if err != nil {
			continue
		}
		if v, ok := results.RunMetric(sum, metric); ok {
			vals = append(vals, v)
		}
	}
	return vals
}

// unconvergedWithBaselines is the cell set of an only_unconverged block: the
// cells still above target plus their baselines at the same rate and shape,
// so every comparison stays paired.
func (s *Sweep) unconvergedWithBaselines() []string {
	need := map[string]bool{}
	for _, id := range s.unconverged() {
		need[id] = true
		c := s.cellRecord(id)
		for _, b := range s.state.Cells {
			if b.Config == s.m.Baseline && b.Rate == c.Rate && b.Shape == c.Shape {
				need[b.ID] = true
			}
		}
	}
	var ids []string
	for _, c := range s.state.Cells {
		if need[c.ID] {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

func (s *Sweep) cellRecord(id string) CellRecord {
	for _, c := range s.state.Cells {
		if c.ID == id {
			return c
		}
	}
	return CellRecord{}
}

func (s *Sweep) recordStop(reason string, blocks int) error {
	rec := &StopRecord{Reason: reason, Blocks: blocks, RelHalf: map[string]float64{}, Target: s.m.Repeat.RelCI, Metric: s.m.Repeat.Metric}
	conv := true
	for _, c := range s.state.Cells {
		ok, rh := s.cellConverged(c.ID)
		rec.RelHalf[c.ID] = rh
		conv = conv && ok
	}
	rec.Converged = conv
	s.state.Stop = rec
	s.logf("sweep stopped: %s", strings.TrimSpace(reason))
	return writeSweep(s.dir, s.state)
}
