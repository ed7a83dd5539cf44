package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
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
func (s *sweep) blocks(ctx context.Context) error {
	renew := false // the previous block ended per-block allocations
	for b := 1; ; b++ {
		blk := s.store.recordedBlock(b)
		if blk == nil {
			v := s.store.planView(s.m.Repeat, s.m.Baseline, s.opts.FailLimit, b-1)
			next, stop := plan.Next(v)
			if stop != nil {
				return s.recordStop(v, *stop)
			}
			var err error
			if blk, err = s.store.recordBlock(*next); err != nil {
				return err
			}
			s.prog.grow(s.store.plannedRuns(s.m.Repeat.Min))
		}
		if renew {
			if err := s.renewAllocations(ctx); err != nil {
				return err
			}
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
		if err := s.fleet.lostHostsError(b, s.lostRuns); err != nil {
			return err
		}
		var err error
		if renew, err = s.endBlockAllocations(ctx, b); err != nil {
			return err
		}
	}
}

// clientLimitedRetries is how many times a client_limited run is run again
// in place.
const clientLimitedRetries = 2

// runCell runs cell in block b unless the journal has it already or the
// cell was given up (then it journals the skip); the fixed-rate blocks and
// the capacity search's rounds both run their cells through it.
func (s *sweep) runCell(ctx context.Context, cell matrices.Cell, b int, seed int64) error {
	if err := ctx.Err(); err != nil {
		return ErrInterrupted
	}
	if s.store.ledger.done(cell.ID, b) {
		return nil
	}
	if why := s.store.ledger.deadReason(cell.ID); why != "" {
		return s.skipDead(cell.ID, b, why)
	}
	if skipped, err := s.skipLost(cell, b); skipped || err != nil {
		return err
	}
	// A run the load generator could not drive on schedule says nothing of
	// the engine: it is run again in place, at the same position of the
	// same block (so the block stays paired), up to clientLimitedRetries
	// times; the last attempt is journaled, naming the earlier ones.
	// Attempts of a re-run in place that an interrupt cut short (none of
	// them journaled) are kept, moved aside like any partial run; the
	// sequence starts again at attempt 1.
	if err := moveAsideRetries(filepath.Join(s.store.dir, "runs", cell.ID), b); err != nil {
		return err
	}
	var earlier []AttemptEntry
	var o *runOutcome
	for attempt := 1; ; attempt++ {
		var err error
		if o, err = s.runOne(ctx, cell, b, seed, attempt, earlier); err != nil {
			return err
		}
		if o.lost {
			return nil
		}
		if !o.again {
			break
		}
		s.logf("cell %s (%s rate=%g) b%d: %s; running it again in place (attempt %d)",
			cell.ID, cell.Config, cell.Rate, b, firstLine(o.entry.Reason), attempt+1)
		earlier = append(earlier, AttemptEntry{Dir: o.entry.Dir, Status: o.entry.Status, Reason: o.entry.Reason})
	}
	if o.gaveUp {
		s.logf("cell %s (%s rate=%g): %d consecutive failed runs; marked failed and skipped: %s", cell.ID, cell.Config, cell.Rate, s.opts.FailLimit, firstLine(o.entry.Reason))
	}
	return nil
}

// briefReason is a one-line form of a failure reason: its first line, and
// when the reason quotes a log, the log's last line (usually the cause).
func briefReason(why string) string {
	lines := strings.Split(strings.TrimSpace(why), "\n")
	first, last := strings.TrimSpace(lines[0]), strings.TrimSpace(lines[len(lines)-1])
	if len(lines) == 1 || last == "" || strings.HasSuffix(first, last) {
		return first
	}
	return first + " … " + last
}

func (s *sweep) skipDead(id string, b int, why string) error {
	// A partial directory an interrupted attempt left is kept, moved aside.
	if err := moveAside(filepath.Join(s.store.dir, "runs", id, "b"+strconv.Itoa(b))); err != nil {
		return err
	}
	now := time.Now().UTC()
	e := JournalEntry{RunRef: results.RunRef{Cell: id, Block: b, Status: results.VerdictFailed, Reason: "skipped: " + why},
		Started: now, Finished: now}
	if _, err := s.store.ledger.record(e); err != nil {
		return err
	}
	s.prog.skip() // the give-up was said once, when it happened
	return nil
}

// recordStop records why the sweep stopped, and how close it came to its
// target, in sweep.json.
func (s *sweep) recordStop(v plan.View, stop plan.Stop) error {
	conv := plan.Converge(v, stop.ByRule)
	if conv.Converged && !stop.ByRule && len(conv.CompHalf) > 0 {
		// The blocks ran out (or the budget) before the rule looked at a
		// point where both its stages agreed, yet every CI the report prints
		// is within target: said, so "converged" in sweep.json is not a
		// surprise beside the reason.
		stop.Reason += fmt.Sprintf("; every comparison on %s has a %.0f%% CI half-width ≤ ±%.1f%% as the report prints it",
			s.m.Repeat.Metric, s.m.Repeat.Confidence*100, s.m.Repeat.RelCI*100)
	}
	s.logf("sweep stopped: %s", strings.TrimSpace(stop.Reason))
	return s.store.recordStop(&StopRecord{Reason: stop.Reason, Blocks: v.Done, RelHalf: conv.RelHalf, Target: s.m.Repeat.RelCI, Metric: s.m.Repeat.Metric,
		Primary: s.m.Repeat.Metric, CompHalf: conv.CompHalf, Stage1Blocks: v.FirstStage(), Converged: conv.Converged,
		RuleStop: stop.ByRule, UnusableCompar: conv.Unusable})
}

// runOutcome is what one run produced.
type runOutcome struct {
	entry   JournalEntry
	summary *results.RunSummary
	gaveUp  bool // this failure gave the cell up
	// again: the attempt was client_limited and is to be run again in
	// place; it was not journaled.
	again bool
	// lost: a host of the run stopped answering; it was journaled
	// host_lost.
	lost bool
}

// runOne performs one (cell, block) run and journals it. It returns an error
// only when the sweep must stop (interrupted, disk full); a failed run is an
// outcome with status "failed". attempt is 1, or the number of a re-run in
// place (runCell) after the earlier attempts, which goes to a directory of
// its own (b<k>-try<n>). A client_limited attempt with re-runs left is not
// journaled (outcome again); the attempt that is names the earlier ones.
func (s *sweep) runOne(ctx context.Context, cell matrices.Cell, block int, seed int64, attempt int, earlier []AttemptEntry) (*runOutcome, error) {
	rel, dir, err := s.runDir(cell, block, attempt)
	if err != nil {
		return nil, err
	}
	entry := JournalEntry{RunRef: results.RunRef{Cell: cell.ID, Block: block, Dir: rel}, Started: time.Now().UTC(), Nodes: s.fleet.slurmNodes()}
	if attempt > 1 {
		entry.Attempt, entry.Superseded = attempt, earlier
	}
	s.prog.begin(fmt.Sprintf("b%d %s rate=%g %s", block, cell.Config, cell.Rate, cell.Shape))

	sum, runErr := s.measurer.measure(ctx, run{cell: cell, block: block, seed: seed, dir: dir})
	if runErr == nil {
		if err := s.store.checkRunGPUs(dir, s.opts.Force); err != nil {
			return nil, err // no journal line: the run is redone if the user forces
		}
	}
	if ctx.Err() != nil {
		// Interrupted: no journal line, so resume redoes this run.
		return nil, ErrInterrupted
	}
	entry.Finished = time.Now().UTC()
	if runErr != nil {
		entry.Status, entry.Reason = results.VerdictFailed, s.redact(runErr.Error())
		if out, err := s.notTheRuns(ctx, cell, block, entry, runErr); out != nil || err != nil {
			return out, err
		}
	} else {
		// results.Decide, inside SummarizeRun, is the one place a verdict
		// is decided; the journal records it.
		entry.Status, entry.Reason = sum.Verdict, s.redact(strings.Join(sum.VerdictReasons, "; "))
	}
	// The journal line comes only after the run directory is complete and
	// durable: a run with a line is never redone, so its files must be there.
	if err := syncTree(dir); err != nil {
		return nil, fmt.Errorf("run %s b%d: %w", cell.ID, block, err)
	}
	if entry.Status == results.VerdictClientLimited && attempt <= clientLimitedRetries {
		s.prog.again(fmt.Sprintf("NOT A RESULT (%s): %s; running it again", entry.Status, firstLine(entry.Reason)))
		return &runOutcome{entry: entry, summary: sum, again: true}, nil
	}
	entry.Self = selfUsage()
	gaveUp, err := s.store.ledger.record(entry)
	if err != nil {
		return nil, err
	}
	s.finishProgress(entry, sum)
	if cse, ok := errors.AsType[*configStartError](runErr); ok {
		s.giveUpConfig(cse)
	}
	return &runOutcome{entry: entry, summary: sum, gaveUp: gaveUp}, nil
}

// runDir creates the directory of a run (moving an earlier one aside) and
// returns it, relative to the sweep and whole: runs/<cell>/b<block>, with
// -try<attempt> for a re-run in place.
func (s *sweep) runDir(cell matrices.Cell, block, attempt int) (rel, dir string, err error) {
	rel = filepath.Join("runs", cell.ID, "b"+strconv.Itoa(block))
	if attempt > 1 {
		rel += "-try" + strconv.Itoa(attempt)
	}
	dir = filepath.Join(s.store.dir, rel)
	if err := moveAside(dir); err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("create run directory: %w", err)
	}
	return rel, dir, nil
}

// notTheRuns handles a run's failure that is not the run's fault: a lost
// allocation or host, a config that cannot start, a full disk, a port in
// use. It returns what runOne returns then; both nil when the failure is
// the run's, which is journaled failed.
func (s *sweep) notTheRuns(ctx context.Context, cell matrices.Cell, block int, entry JournalEntry, runErr error) (*runOutcome, error) {
	if err := s.fleet.lostAllocation(ctx, runErr); err != nil {
		// Not the run's fault: resume redoes it in a new allocation.
		return nil, fmt.Errorf("run %s b%d: %w", cell.ID, block, err)
	}
	if host, err := s.fleet.lostHost(ctx, runErr); err != nil {
		// Not the run's fault either: the host is lost, not the run.
		// Journaled host_lost, which resume runs again (hostlost.go).
		if jerr := s.journalLost(cell, block, entry.Dir, err.Error(), entry.Started); jerr != nil {
			return nil, jerr
		}
		s.prog.finish("HOST LOST: " + firstLine(s.redact(err.Error())))
		if host == "" {
			return nil, fmt.Errorf("run %s b%d: %w; journaled host_lost, which resume runs again once the host answers", cell.ID, block, err)
		}
		s.fleet.lose(host, err)
		s.logf("host %s stopped answering during %s b%d; the block goes on with the runs that need no lost host, then the sweep stops", host, cell.ID, block)
		return &runOutcome{entry: entry, lost: true}, nil
	}
	if cse, ok := errors.AsType[*configStartError](runErr); ok && !s.opts.KeepGoing {
		// Every run of the config would burn a launch the same way:
		// stop with no journal line, so resume (once fixed) redoes it.
		return nil, fmt.Errorf("run %s b%d: %w\n(with --keep-going the sweep goes on with the other configs and marks %s failed)", cell.ID, block, runErr, cse.config)
	}
	if diskFull(runErr) || errors.Is(runErr, errPortInUse) {
		// Not the run's fault, and every later run would fail the same
		// way: stop the sweep with no journal line, so resume redoes it.
		return nil, fmt.Errorf("run %s b%d: %w", cell.ID, block, runErr)
	}
	return nil, nil
}

// finishProgress ends the progress line of a journaled run: its failure,
// why it is not a result, or its headline figures.
func (s *sweep) finishProgress(entry JournalEntry, sum *results.RunSummary) {
	switch {
	case entry.Status == results.VerdictFailed:
		s.prog.finish("FAILED: " + briefReason(entry.Reason)) // the log's last line is the cause
	case !entry.Status.Usable():
		s.prog.finish(fmt.Sprintf("NOT A RESULT (%s): %s", entry.Status, firstLine(entry.Reason)))
	default:
		m := results.RunMetrics(sum)
		f := func(key string, prec int) string {
			if v, ok := m[key]; ok {
				return strconv.FormatFloat(v, 'f', prec, 64)
			}
			return "-"
		}
		s.prog.finish(fmt.Sprintf("ttft p90 %s ms, tpot p90 %s ms, thr %s",
			f(results.TTFT.Key(results.StatP90), 0), f(results.TPOT.Key(results.StatP90), 1), f(results.ThrRatio.Key, 2)))
	}
}

// giveUpConfig skips every later run of a config whose engine does not
// start (--keep-going), and says so once.
func (s *sweep) giveUpConfig(cse *configStartError) {
	why := fmt.Sprintf("config %s's engine failed before it was ready on %d launches: %s", cse.config, cse.launches, cse.last.cause)
	for id, c := range s.cells {
		if c.Config == cse.config {
			s.store.ledger.giveUp(id, why)
		}
	}
	s.logf("config %s: its engine failed before it was ready on %d launches with the same cause: %s (log: %s on host %s); marked failed, its other runs skipped (--keep-going)",
		cse.config, cse.launches, cse.last.cause, cse.last.logPath, cse.last.hostName)
}
