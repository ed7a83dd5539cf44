package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/mbench/mbench/internal/cpupin"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/results/report"
	"github.com/mbench/mbench/shquote"
)

// execute runs the sweep the store records — blocks until the stopping
// rule says stop, or a capacity search's rounds — then exports. req is what
// every request carries.
func (s *sweep) execute(ctx context.Context, req openloop.Request) (*Outcome, error) {
	pin, err := newPinning(s.opts.ClientCPUs)
	if err != nil {
		return nil, err
	}
	s.assemble(req)
	s.runner.pin = pin
	if pin != nil {
		s.logf("the load generator runs on CPUs %s during each load; local engines are kept off them", cpupin.Format(pin.client))
	}
	if err := s.store.openJournal(s.opts.FailLimit); err != nil {
		return nil, err
	}
	s.startProgress()
	defer s.prog.close()
	if err = s.fleet.prepare(ctx); err != nil {
		s.teardown(ctx)
		if ctx.Err() != nil {
			return nil, s.interrupted()
		}
		return nil, err
	}
	s.instr.open(ctx)
	defer s.instr.close() // the probe a per-block allocation renewed, if it did
	s.register(true)
	defer s.register(false)

	if s.m.Capacity != nil {
		err = s.capacity(ctx) // a search over rates instead of fixed-rate blocks (capacity.go)
	} else {
		err = s.blocks(ctx)
	}
	if err == nil {
		s.completeAllocations(ctx) // a finished sweep's Slurm jobs end COMPLETED
	}
	cerr := s.teardown(ctx)
	if err != nil {
		if errors.Is(err, ErrInterrupted) || ctx.Err() != nil {
			return nil, s.interrupted()
		}
		if diskFull(err) {
			return nil, fmt.Errorf("%w\nthe disk holding %s is full; the journal and the runs already recorded are intact; free some space, then continue with: %s", err, s.store.dir, s.resumeHint())
		}
		return nil, fmt.Errorf("%w\nthe sweep stopped; the journal and the runs already recorded are intact; once this is fixed, continue with: %s", err, s.resumeHint())
	}
	if cerr != nil {
		s.logf("warning: teardown: %v", cerr)
	}
	rep, err := exportSweep(ctx, s.store.dir, ExportOverrides{}, false)
	if err != nil {
		if ctx.Err() != nil {
			return nil, s.interrupted()
		}
		if diskFull(err) {
			return nil, fmt.Errorf("export: %w\nthe disk holding %s is full; every run is recorded; free some space, then run: mbench export %s", err, s.store.dir, s.store.dir)
		}
		return nil, fmt.Errorf("export: %w", err)
	}
	return s.outcome(rep), nil
}

// startProgress opens the progress display, counting the runs a resumed
// sweep has already made.
func (s *sweep) startProgress() {
	s.prog = newProgress(s.opts.Stderr, s.store.plannedRuns(s.m.Repeat.Min), s.opts.Quiet)
	notResults := 0
	for k, e := range s.store.ledger.runs {
		if _, ok := s.cells[k.cell]; ok {
			s.prog.done++
			if !e.Status.Usable() {
				notResults++
			}
		}
	}
	if s.prog.done > 0 {
		s.logf("%s", resumeLine(s.store.dir, s.prog.done, s.prog.total, notResults))
	}
	if s.m.Repeat.Budget > 0 {
		s.prog.setBudget(s.store.state.Created.Add(s.m.Repeat.Budget))
	}
}

// outcome is what a finished sweep reports, from its export rep.
func (s *sweep) outcome(rep *report.Exported) *Outcome {
	o := &Outcome{Dir: s.store.dir, Report: filepath.Join(s.store.dir, "report.md"), Removed: s.store.state.Removed,
		Verdicts: s.store.verdicts(s.cells)} // a removed cell's runs do not count
	if s.store.state.Stop != nil {
		o.StopReason = s.store.state.Stop.Reason
	}
	o.Unusable = unusableCells(rep, s.store.ledger.runs)
	o.Skipped = s.store.ledger.givenUp(s.cells)
	if s.m.Capacity != nil { // probes beyond the capacity are meant to fail: only undecided searches are not results
		o.Unusable = capacityUnusable(s.store.dir)
	}
	return o
}

// teardown stops the engines, in teardownContext, and closes every host
// connection and the sweep's log.
func (s *sweep) teardown(ctx context.Context) error {
	tctx, cancel := teardownContext(ctx)
	defer cancel()
	err := s.engines.stop(tctx)
	s.fleet.close()
	s.sweepLog.close()
	return err
}

// teardownContext is the context of a teardown after ctx: not canceled with
// it, and after an interrupt bounded (the user was promised a prompt exit),
// so that a stop's SIGTERM grace is cut and SIGKILL and its check still fit
// in interruptTeardown.
func teardownContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() != nil {
		return context.WithTimeout(context.WithoutCancel(ctx), interruptTeardown)
	}
	return context.WithoutCancel(ctx), func() {}
}

// interruptTeardown bounds the engine teardown after Ctrl-C.
const interruptTeardown = 7 * time.Second

func (s *sweep) interrupted() error {
	return fmt.Errorf("%w; engines stopped; continue with: %s", ErrInterrupted, s.resumeHint())
}

func (s *sweep) resumeHint() string {
	return cmp.Or(s.opts.ResumeHint, "mbench resume "+shquote.Quote(s.store.dir))
}

// unusableCells names the cells of rep with no usable run, with the
// verdicts of the runs they had.
func unusableCells(rep *report.Exported, journal map[runKey]JournalEntry) []string {
	var out []string
	for _, c := range rep.Cells {
		if c.NRuns > 0 {
			continue
		}
		vc := results.VerdictCounts{}
		for k, e := range journal {
			if k.cell == c.Cell {
				vc[e.Status]++
			}
		}
		why := "no run"
		if vc.Total() > 0 {
			why = vc.String()
		}
		out = append(out, fmt.Sprintf("%s (%s rate=%g %s): %s", c.Cell, c.Config, c.Rate, c.Shape, why))
	}
	return out
}

// resumeLine says where a resumed sweep starts: "resuming DIR: 7 of 20
// runs done (2 not results), 13 to go".
func resumeLine(dir string, done, total, notResults int) string {
	s := fmt.Sprintf("resuming %s: %d of %d runs done", dir, done, total)
	if notResults > 0 {
		s += fmt.Sprintf(" (%d not results)", notResults)
	}
	if left := total - done; left > 0 {
		s += fmt.Sprintf(", %d to go", left)
	} else {
		s += "; the stopping rule decides whether more blocks run"
	}
	return s
}
