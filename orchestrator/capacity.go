package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/orchestrator/internal/plan"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/results/report"
	"github.com/mbench/mbench/results/sweepdir"
)

// A capacity search (the matrix's capacity: section) replaces the fixed-rate
// blocks. It proceeds in rounds: each round plans, for every config and
// shape whose search is not finished, the rate(s) to probe next from the
// probes finished so far (plan.Search), then runs each of them once in every
// block 1..capacity.blocks, the round's probes in a random order within each
// block, every block with its own workload seed shared by all configs. Each
// probe run is an ordinary run of a cell (config, rate, shape) with its
// journal line; the plan is a function of the journaled results alone, so
// a resumed sweep replays the rounds, skips the runs already journaled and
// continues where it stopped.

// capacity runs the capacity search to its end.
func (s *sweep) capacity(ctx context.Context) error {
	rc, err := recordedCapacityOf(s.store.state)
	if err != nil {
		return err
	}
	for k := 1; ; k++ {
		if ctx.Err() != nil {
			return ErrInterrupted
		}
		rep := results.AnalyzeCapacity(rc.spec(), s.capacityRuns(rc, true))
		var round []matrices.Cell
		var probes []plan.Probe
		for _, sr := range rep.Searches {
			next := plan.Retries(&sr, rc.Retries) // the probes first give usable runs, then the planner goes on
			if len(next) == 0 {
				rates, _ := plan.Search(rc.Capacity, &sr)
				for _, r := range rates {
					next = append(next, plan.Retry{Rate: r})
				}
			}
			for _, r := range next {
				cell, err := s.capacityCell(sr.Config, sr.Shape, r.Rate, r.Attempt)
				if err != nil {
					return err
				}
				round = append(round, cell)
				probes = append(probes, plan.Probe{Cell: cell.ID, Config: cell.Config, Shape: sr.Shape, Rate: r.Rate, Attempt: r.Attempt, Blocks: r.Blocks})
			}
		}
		rec := plan.RoundOf(k, probes, rc.Blocks, s.store.state.Seed, s.store.state.Randomize)
		changed, replaced, err := s.store.recordRound(rec, s.opts.Force)
		if err != nil {
			return err
		}
		if replaced != "" {
			s.logf("warning: capacity round %d differs from its record (%s); --force: the recorded rounds from %d on are replaced", rec.Round, replaced, rec.Round)
		}
		if s.store.addCells(round) || changed {
			if err := s.store.save(); err != nil {
				return err
			}
		}
		if len(round) == 0 {
			return s.recordCapacityStop(rc, rep)
		}
		if err := s.capacityRound(ctx, rec); err != nil {
			return err
		}
	}
}

// capacityRound runs every probe of a round once in each block, in the
// order its record gives.
func (s *sweep) capacityRound(ctx context.Context, rec plan.Round) error {
	missing := 0
	for _, blk := range rec.Blocks {
		for _, id := range blk.Order {
			if !s.store.ledger.done(id, blk.Block) {
				missing++
			}
		}
	}
	s.prog.grow(s.prog.done + missing)
	for _, blk := range rec.Blocks {
		b := blk.Block
		var names []string
		for _, id := range blk.Order {
			names = append(names, fmt.Sprintf("%s@%g", s.cells[id].Config, s.cells[id].Rate))
		}
		s.tracef("capacity round %d, block %d, order: %s", rec.Round, b, strings.Join(names, " "))
		for _, id := range blk.Order {
			if err := s.runCell(ctx, s.cells[id], b, blk.Seed); err != nil {
				return err
			}
		}
		if err := s.fleet.lostHostsError(b, s.lostRuns); err != nil {
			return err
		}
	}
	return nil
}

// capacityCell is the cell of config at rate with the named shape,
// registered in s.cells.
func (s *sweep) capacityCell(config, shape string, rate float64, attempt int) (matrices.Cell, error) {
	i := slices.IndexFunc(s.m.Shapes, func(sh openloop.Shape) bool { return sh.Name == shape })
	if i < 0 {
		return matrices.Cell{}, fmt.Errorf("capacity search: shape %q is not in the matrix", shape)
	}
	c, err := s.m.CapacityCell(config, rate, s.m.Shapes[i], attempt)
	if err == nil {
		s.cells[c.ID] = c
	}
	return c, err
}

// capacityRuns reads the journaled runs of the capacity cells in s.cells;
// with completeOnly, only probes that have every block journaled (what the
// plan may depend on).
func (s *sweep) capacityRuns(rc *recordedCapacity, completeOnly bool) []results.CapacityRun {
	cells := slices.DeleteFunc(slices.Clone(s.store.state.Cells), func(c results.CellInfo) bool {
		_, ok := s.cells[c.ID]
		return !ok
	})
	var blocks map[string]int
	if completeOnly {
		blocks = plannedBlocks(s.store.state.CapacityRounds, rc.Blocks)
	}
	return capacityRuns(s.store.dir, cells, s.store.ledger.runs, rc.metrics(), blocks, s.store.values)
}

// plannedBlocks is, per cell of the recorded rounds, how many blocks it runs
// in: every one of the search's, or a re-run's own.
func plannedBlocks(rounds []plan.Round, all int) map[string]int {
	out := map[string]int{}
	for _, r := range rounds {
		for _, p := range r.Probes {
			out[p.Cell] = all
			if p.Blocks != nil {
				out[p.Cell] = len(p.Blocks)
			}
		}
	}
	return out
}

// capacityRuns lists the journaled runs of cells with their verdicts and,
// for ok runs, the metric (NaN when its summary cannot be read); with
// complete set, only those of cells that have all their planned blocks
// journaled (what the plan may depend on).
func capacityRuns(dir string, cells []results.CellInfo, journal map[runKey]JournalEntry, metrics []string, complete map[string]int, values runValues) []results.CapacityRun {
	var out []results.CapacityRun
	for _, c := range cells {
		var mine []JournalEntry
		for k, e := range journal {
			if k.cell == c.ID {
				mine = append(mine, e)
			}
		}
		if n, ok := complete[c.ID]; complete != nil && (!ok || len(mine) < n) {
			continue
		}
		for _, e := range mine {
			r := results.CapacityRun{CellInfo: c, Block: e.Block, Status: e.Status, Value: math.NaN()}
			if e.Status.Usable() {
				r.Value, _ = values.get(dir, e, metrics[0])
				if len(metrics) > 1 {
					r.Values = map[string]float64{}
					for _, m := range metrics {
						r.Values[m], _ = values.get(dir, e, m)
					}
				}
			}
			out = append(out, r)
		}
	}
	return out
}

// recordStop-like end of a capacity search: the stop reason in sweep.json.
func (s *sweep) recordCapacityStop(rc *recordedCapacity, rep results.CapacityReport) error {
	var parts []string
	for _, sr := range rep.Searches {
		_, note := plan.Search(rc.Capacity, &sr)
		parts = append(parts, fmt.Sprintf("%s %s: %s %s", sr.Config, sr.Shape, report.IntervalText(sr.Lo, sr.Hi), note))
	}
	reason := "capacity search finished: " + strings.Join(parts, "; ")
	s.logf("sweep stopped: %s", reason)
	return s.store.recordStop(&StopRecord{Reason: reason, Blocks: rc.Blocks, Metric: rc.Metric, Primary: rc.Metric, Converged: true})
}

// capacityUnusable names the searches that bracketed nothing (no rate held
// or failed with confidence): their sweep exits 3 like a cell without a
// usable run.
func capacityUnusable(dir string) []string {
	rep, err := sweepdir.ReadCapacity(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, sr := range rep.Searches {
		if sr.Lo == nil && sr.Hi == nil {
			out = append(out, fmt.Sprintf("capacity of %s (%s): nothing decided: %s", sr.Config, sr.Shape, sr.Note))
		}
	}
	return out
}

// capacityExport is the analysis of a capacity search, capacity.json's
// content, from sweep.json and the journal; nil for a fixed-rate sweep.
func capacityExport(dir string, st *SweepState, entries []JournalEntry) (*results.CapacityReport, error) {
	rc, err := recordedCapacityOf(st)
	if err != nil || rc == nil {
		return nil, err
	}
	runs := capacityRuns(dir, st.Cells, journalIndex(entries), rc.metrics(), nil, nil)
	rep := results.AnalyzeCapacity(rc.spec(), runs)
	rep.Simulated = st.Simulated
	for i := range rep.Searches {
		sr := &rep.Searches[i]
		next, note := plan.Search(rc.Capacity, sr)
		if len(next) > 0 {
			note = fmt.Sprintf("not finished: next rate %g (resume the sweep)", next[0])
		}
		sr.Note = note
	}
	if st.Stop != nil {
		rep.Stop = st.Stop.Reason
	}
	return &rep, nil
}

// recordedCapacity is the capacity search as sweep.json's resolved matrix
// records it, with what its analysis needs of the rest of the matrix.
type recordedCapacity struct {
	*matrices.Capacity
	confidence float64
	baseline   string
	configs    []string
	shapes     []string
}

// recordedCapacityOf reads the capacity section from st's resolved matrix,
// with the method (baseline, confidence) as resolvedMethod reads it; nil
// (and no error) for a fixed-rate sweep.
func recordedCapacityOf(st *SweepState) (*recordedCapacity, error) {
	if len(st.Resolved) == 0 {
		return nil, nil // resolvedMethod reports it
	}
	var r struct {
		Capacity    *matrices.Capacity `json:"capacity"`
		ConfigOrder []string           `json:"config_order"`
		Shapes      []struct {
			Name string `json:"name"`
		} `json:"shapes"`
	}
	if err := json.Unmarshal(st.Resolved, &r); err != nil {
		return nil, fmt.Errorf("sweep.json: resolved matrix: %w", err)
	}
	if r.Capacity == nil {
		return nil, nil
	}
	rm, err := resolvedMethod(st)
	if err != nil {
		return nil, err
	}
	rc := &recordedCapacity{Capacity: r.Capacity, confidence: rm.Repeat.Confidence, baseline: rm.Baseline, configs: r.ConfigOrder}
	for _, sh := range r.Shapes {
		rc.shapes = append(rc.shapes, sh.Name)
	}
	return rc, nil
}

func (rc *recordedCapacity) spec() results.CapacitySpec {
	sp := results.CapacitySpec{Metric: rc.Metric, MaxMs: rc.MaxMs, Lo: rc.Lo, Hi: rc.Hi, Tolerance: rc.Tolerance,
		Blocks: rc.Blocks, Confidence: rc.confidence, Baseline: rc.baseline, Configs: rc.configs, Shapes: rc.shapes}
	if len(rc.Constraints) > 0 {
		sp.Bounds = append([]results.Bound(nil), rc.Constraints...)
		sp.Metric, sp.MaxMs = rc.Constraints[0].Metric, 0
		if x := rc.Constraints[0].MaxMs; x != nil {
			sp.MaxMs = *x
		}
	}
	if rc.Concurrency() {
		sp.Over = matrices.OverConcurrency
	}
	return sp
}

// metrics are the metrics the search's bounds name, the first first.
func (rc *recordedCapacity) metrics() []string {
	var out []string
	for _, b := range rc.Bounds() {
		out = append(out, b.Metric)
	}
	return out
}

// errCapacityReplay: a resumed capacity search planned a round other than
// the one recorded.
var errCapacityReplay = errors.New("the resumed capacity search does not replay the recorded rounds")
