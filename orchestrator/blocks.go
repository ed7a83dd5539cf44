package orchestrator

import (
	"context"
	"fmt"
	"github.com/mbench/mbench/stats"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mbench/mbench/matrices"
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

func (s *Sweep) recordedBlock(b int) *BlockRecord {
	for i := range s.state.Blocks {
		if s.state.Blocks[i].Block == b {
			return &s.state.Blocks[i]
		}
	}
	return nil
}

// planBlock records block b in sweep.json before any of its runs start. Its
// order is the design's row for b over every cell; an only_unconverged block
// keeps that order for the cells it runs.
func (s *Sweep) planBlock(b int) (*BlockRecord, error) {
	order := BlockOrder(s.state.Seed, b, cellIDs(s.state.Cells), s.state.Randomize)
	if s.m.Repeat.OnlyUnconverged && b > ruleMinBlocks(s.stage1()) {
		keep := map[string]bool{}
		for _, id := range s.unconvergedWithBaselines() {
			keep[id] = true
		}
		order = slices.DeleteFunc(order, func(id string) bool { return !keep[id] })
	}
	s.state.Blocks = append(s.state.Blocks, BlockRecord{Block: b, Seed: BlockSeed(s.state.Seed, b), Order: order})
	s.state.Design = designRecord(s.state)
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
	if _, err := s.ledger.record(e); err != nil {
		return err
	}
	s.prog.finish("skipped (cell failed)")
	return nil
}

// shouldStop applies the stopping rule after `done` complete blocks: never
// before repeat.min; always at repeat.max or when the budget is spent; in
// between, after a complete pair of mirror-image blocks, once every paired
// comparison's two-stage CI half-width on the primary metric is within
// repeat.rel_ci.
func (s *Sweep) shouldStop(done int) (string, bool) {
	rep := s.m.Repeat
	if done < max(rep.Min, 1) {
		return "", false
	}
	if done >= rep.Max {
		return fmt.Sprintf("reached repeat.max = %d blocks", rep.Max), true
	}
	elapsed := time.Since(s.state.Created)
	if rep.Budget > 0 && elapsed >= rep.Budget {
		return fmt.Sprintf("time budget of %s spent after %d blocks", rep.Budget, done), true
	}
	if len(s.ledger.dead) == len(s.state.Cells) {
		return fmt.Sprintf("every cell failed %d runs in a row and was given up after %d blocks: nothing converged", s.opts.FailLimit, done), true
	}
	if rep.Budget > 0 && s.state.Randomize && done%2 == 0 && elapsed+2*elapsed/time.Duration(done) > rep.Budget {
		return fmt.Sprintf("time budget of %s: another pair of blocks (about %s) would not finish within it; stopped after %d blocks, a balanced design",
			rep.Budget, (2 * elapsed / time.Duration(done)).Round(time.Second), done), true
	}
	if done < ruleMinBlocks(s.stage1()) || !pairComplete(done, s.state.Randomize) || len(s.unconverged()) > 0 {
		return "", false
	}
	if len(s.primaryComparisons()) == 0 {
		return fmt.Sprintf("converged: every cell's %s has a relative %.0f%% CI half-width ≤ %.1f%% after %d blocks (no comparisons in this sweep)",
			rep.Metric, rep.Confidence*100, rep.RelCI*100, done), true
	}
	s.ruleStop = true
	return fmt.Sprintf("converged: every comparison on the primary metric %s has a projected %.0f%% CI half-width ≤ ±%.1f%% after %d blocks (first stage %d, second stage %d)",
		rep.Metric, rep.Confidence*100, rep.RelCI*100, done, s.stage1(), done-s.stage1()), true
}

// ruleMinBlocks is the fewest blocks after which the stopping rule may end
// the sweep: the first stage and a second stage at least as long (at least
// two blocks), since the CIs of a sweep the rule ended take their spread from
// the second stage alone (results.MethodSecondStage) and need its degrees of
// freedom.
func ruleMinBlocks(stage1 int) int { return stage1 + max(2, stage1) }

// pairComplete reports whether done blocks end a pair of mirror-image
// blocks (always true for unrandomized orders): the rule looks only there.
func pairComplete(done int, randomize bool) bool { return !randomize || done%2 == 0 }

// withinTarget is the stopping rule's test of one comparison: it has a CI
// (ok) and its half-width is at most the target.
func withinTarget(half float64, ok bool, target float64) bool { return ok && half <= target }

// pairedCells is one comparison of the sweep: treat against base, named as
// the report names it.
type pairedCells struct {
	name        string
	base, treat string
}

// primaryComparisons lists the comparisons the stopping rule targets: every
// config against the baseline at the same rate and shape, and every A/A
// control against its original.
func (s *Sweep) primaryComparisons() []pairedCells {
	var out []pairedCells
	for _, c := range s.state.Cells {
		for _, b := range s.state.Cells {
			if b.ID == c.ID || b.Rate != c.Rate || b.Shape != c.Shape || b.SameAs != "" {
				continue
			}
			aa := c.SameAs != "" && (c.SameAs == b.Config || c.SameAs == b.ID)
			main := c.SameAs == "" && c.Config != s.m.Baseline && b.Config == s.m.Baseline
			if aa || main {
				out = append(out, pairedCells{fmt.Sprintf("%s vs %s @ %g %s", c.Config, b.Config, c.Rate, c.Shape), b.ID, c.ID})
			}
		}
	}
	return out
}

// comparisonHalf is the two-stage CI half-width (a fraction) of one
// comparison on the primary metric over the usable runs; ok is false when
// it has no CI (fewer than two paired usable runs in the first stage).
func (s *Sweep) comparisonHalf(p pairedCells) (half float64, ok bool) {
	base, treat := s.metricValues(p.base, s.m.Repeat.Metric), s.metricValues(p.treat, s.m.Repeat.Metric)
	return twoStageHalf(results.CompareTwoStage(base, treat, s.stage1(), s.m.Repeat.Confidence))
}

// twoStageHalf is a comparison's two-stage CI half-width as a fraction,
// (Hi − Lo)/2; ok is false when it has none (fewer than two usable
// first-stage pairs: the first stage cannot plan the sweep, which then runs
// to repeat.max or its budget).
func twoStageHalf(c results.Comparison) (half float64, ok bool) {
	if c.N < 2 || c.Method != results.MethodTwoStage {
		return math.NaN(), false
	}
	return (c.Hi - c.Lo) / 2, true
}

// stage1 is the number of first-stage blocks.
func (s *Sweep) stage1() int {
	if s.state.Stage1 > 0 {
		return s.state.Stage1
	}
	return s.m.Repeat.Min
}

// unconverged lists the cells of comparisons whose primary-metric CI is not
// yet within target (a comparison without usable runs never is). Without
// comparisons it falls back to each cell's own relative CI.
func (s *Sweep) unconverged() []string {
	comps := s.primaryComparisons()
	seen := map[string]bool{}
	var out []string
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, p := range comps {
		if h, ok := s.comparisonHalf(p); !withinTarget(h, ok, s.m.Repeat.RelCI) {
			add(p.treat)
			add(p.base)
		}
	}
	if len(comps) == 0 {
		for _, c := range s.state.Cells {
			if ok, _ := s.cellConverged(c.ID); !ok {
				add(c.ID)
			}
		}
	}
	return out
}

func (s *Sweep) cellConverged(id string) (bool, float64) {
	vals := slices.Collect(maps.Values(s.metricValues(id, s.m.Repeat.Metric)))
	if len(vals) < 2 {
		return false, math.NaN()
	}
	return stats.Converged(vals, s.m.Repeat.RelCI, s.m.Repeat.Confidence)
}

// metricValues reads the metric of every usable run of a cell (status
// "ok": only those are results), block → value.
func (s *Sweep) metricValues(id, metric string) map[int]float64 {
	vals := map[int]float64{}
	for k, e := range s.ledger.runs {
		if k.cell != id || !e.Status.Usable() {
			continue
		}
		sum, err := results.ReadRunSummary(filepath.Join(s.dir, e.Dir, "summary_A.json"))
		if err != nil {
			continue
		}
		if v, ok := results.RunMetric(sum, metric); ok {
			vals[k.block] = v
		}
	}
	return vals
}

// unconvergedWithBaselines is the cell set of an only_unconverged block: both
// cells of every comparison still above target, so every comparison stays
// paired. Cells marked failed are left out: more runs will not help.
func (s *Sweep) unconvergedWithBaselines() []string {
	return slices.DeleteFunc(s.unconverged(), func(id string) bool { return s.ledger.deadReason(id) != "" })
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
	rec := &StopRecord{Reason: reason, Blocks: blocks, RelHalf: map[string]float64{}, Target: s.m.Repeat.RelCI, Metric: s.m.Repeat.Metric,
		Primary: s.m.Repeat.Metric, CompHalf: map[string]float64{}, Stage1Blocks: s.stage1()}
	for _, c := range s.state.Cells {
		if _, rh := s.cellConverged(c.ID); !math.IsNaN(rh) {
			rec.RelHalf[c.ID] = rh
		}
	}
	comps := s.primaryComparisons()
	conv := true
	for _, p := range comps {
		h, ok := s.comparisonHalf(p)
		if !ok {
			rec.UnusableCompar = append(rec.UnusableCompar, p.name)
			conv = false
			continue
		}
		rec.CompHalf[p.name] = h
		conv = conv && h <= s.m.Repeat.RelCI
	}
	if len(comps) == 0 {
		for _, c := range s.state.Cells {
			ok, _ := s.cellConverged(c.ID)
			conv = conv && ok
		}
	}
	rec.Converged = conv
	rec.RuleStop = s.ruleStop
	s.state.Stop = rec
	s.logf("sweep stopped: %s", strings.TrimSpace(reason))
	return writeSweep(s.dir, s.state)
}
