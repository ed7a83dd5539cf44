package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/internal/plan"
	"github.com/mbench/mbench/results"
)

// Run starts a sweep of the matrix at matrixPath, or continues one in an
// existing results directory: cells whose hash is unchanged keep their
// results, changed or new cells run, removed cells are listed.
func Run(ctx context.Context, matrixPath string, opts Options) (*Outcome, error) {
	m, err := matrices.Load(matrixPath)
	if err != nil {
		return nil, err
	}
	if opts.DryRun {
		return nil, DryRun(m, opts)
	}
	out := opts.Out
	if out == "" {
		out = DefaultOut(m.Name, time.Now())
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return nil, fmt.Errorf("results directory %s: %w", out, err)
	}
	matrixAbs, _ := filepath.Abs(matrixPath)
	s := newSweep(m, abs, opts)
	if s.request, err = m.LoadRequest(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("create results directory: %w", err)
	}
	lock, err := LockDir(abs)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	old, err := ReadSweep(abs)
	switch {
	case err == nil:
		if err := s.reconcile(old, matrixAbs); err != nil {
			return nil, err
		}
		if err := s.keepMatrixCopy(matrixPath); err != nil {
			return nil, err
		}
		if err := writeSweep(abs, s.state); err != nil {
			return nil, err
		}
	case errors.Is(err, os.ErrNotExist):
		resolved, err := m.Resolved()
		if err != nil {
			return nil, fmt.Errorf("resolve matrix: %w", err)
		}
		s.state = &SweepState{Format: 1, SweepID: sweepID(m.Name, abs), Name: m.Name, MatrixFile: matrixAbs,
			MatrixHash: m.Hash, Resolved: resolved, Seed: m.Seed, Randomize: m.Repeat.Randomize,
			Cells: cellRecords(m), Fingerprint: s.fingerprint(), Created: time.Now().UTC(), Simulated: m.Engine.Kind == matrices.EngineSim,
			Stage1: m.Repeat.Min}
		if err := s.keepMatrixCopy(matrixPath); err != nil {
			return nil, err
		}
		if err := writeSweep(abs, s.state); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	return s.execute(ctx)
}

// Resume continues the sweep in dir exactly as recorded: the same block
// orders and seeds. A run without a journal line is redone; its partial
// directory is moved aside; engines left behind are stopped first.
func Resume(ctx context.Context, dir string, opts Options) (*Outcome, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	lock, err := LockDir(abs)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	st, err := ReadSweep(abs) // again, now that no other process writes it
	if err != nil {
		return nil, err
	}
	m, err := resumeMatrix(abs, st, opts.MatrixOverride)
	if err != nil {
		return nil, fmt.Errorf("resume %s: %w", dir, err)
	}
	s := newSweep(m, abs, opts)
	if s.request, err = m.LoadRequest(); err != nil {
		return nil, err
	}
	s.state = st
	if err := s.checkFingerprint(); err != nil {
		return nil, err
	}
	for _, f := range cleanTemps(abs) {
		s.tracef("removed a temporary file left by an interrupted write: %s", f)
	}
	if err := s.verifyRuns(); err != nil {
		return nil, err
	}
	return s.execute(ctx)
}

// reconcile adopts an existing results directory for an edited matrix.
func (s *Sweep) reconcile(old *SweepState, matrixAbs string) error {
	s.state = old
	if err := s.checkFingerprint(); err != nil {
		return err
	}
	now := cellRecords(s.m)
	keep := map[string]bool{}
	for _, c := range now {
		keep[c.ID] = true
	}
	var removed []CellRecord
	for _, c := range old.Cells {
		if !keep[c.ID] {
			removed = append(removed, c)
		}
	}
	if old.MatrixHash != s.m.Hash {
		resolved, err := s.m.Resolved()
		if err != nil {
			return err
		}
		old.MatrixHash, old.Resolved, old.MatrixFile = s.m.Hash, resolved, matrixAbs
		old.Cells, old.Removed = now, append(old.Removed, removed...)
		old.Seed, old.Randomize = s.m.Seed, s.m.Repeat.Randomize
		// Re-plan the recorded blocks over the new cell set; runs already in
		// the journal keep their results.
		ids := cellIDs(now)
		for i := range old.Blocks {
			old.Blocks[i].Order = plan.BlockOrder(old.Seed, old.Blocks[i].Block, ids, old.Randomize)
		}
		old.Design = plan.DesignOf(len(old.Cells), old.Randomize, old.Blocks)
		if old.Stage1 == 0 {
			old.Stage1 = s.m.Repeat.Min // the stopping rule from here on is the two-stage one
		}
		old.Stop = nil
		old.CapacityRounds = nil // a changed search replans its rounds; runs of cells it probes again are kept
		for _, c := range removed {
			s.logf("removed cell %s (%s rate=%g %s): its results stay on disk but leave the report", c.ID, c.Config, c.Rate, c.Shape)
		}
	}
	return writeSweep(s.dir, old)
}

func cellRecords(m *matrices.Matrix) []CellRecord {
	var out []CellRecord
	for _, c := range m.Cells() {
		out = append(out, CellRecord{ID: c.ID, Config: c.Config, Rate: c.Rate, Shape: c.Shape.Name, SameAs: c.SameAs})
	}
	return out
}

func cellIDs(cs []CellRecord) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

// fingerprint is what must not change under a sweep's results.
func (s *Sweep) fingerprint() map[string]string {
	fp := map[string]string{
		"mbench_version": s.opts.Version,
		"engine_kind":    string(s.m.Engine.Kind),
		"os_arch":        runtime.GOOS + "/" + runtime.GOARCH,
	}
	var hs []string
	for _, n := range s.m.HostOrder {
		hs = append(hs, n+"="+s.m.Hosts[n].Address)
	}
	fp["hosts"] = strings.Join(hs, ",")
	for k, v := range localGPUFingerprint() {
		fp[k] = v
	}
	return fp
}

func (s *Sweep) checkFingerprint() error {
	now := s.fingerprint()
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(now)) {
		if old, ok := s.state.Fingerprint[k]; ok && old != now[k] {
			diffs = append(diffs, fmt.Sprintf("%s: %q → %q", k, old, now[k]))
		}
	}
	if len(diffs) > 0 && !s.opts.Force {
		return fmt.Errorf("%w (%s); refusing to mix results from two environments; use --force to accept", errFingerprint, strings.Join(diffs, "; "))
	}
	if s.state.Fingerprint == nil {
		s.state.Fingerprint = map[string]string{}
	}
	for k, v := range now {
		s.state.Fingerprint[k] = v
	}
	return nil
}

// execute runs blocks until the stopping rule says stop, then exports.
func (s *Sweep) execute(ctx context.Context) (*Outcome, error) {
	s.fleet.sweepID = s.state.SweepID
	led, err := openLedger(s.dir, s.opts.FailLimit)
	if err != nil {
		return nil, err
	}
	s.ledger = led
	s.prog = newProgress(s.opts.Stderr, s.plannedRuns(), s.opts.Quiet)
	for k := range s.ledger.runs {
		if _, ok := s.cells[k.cell]; ok {
			s.prog.done++
		}
	}
	defer s.prog.close()
	if err := s.prepareHosts(ctx); err != nil {
		s.teardown(ctx)
		if ctx.Err() != nil {
			return nil, s.interrupted()
		}
		return nil, err
	}
	s.openGPU(ctx)
	defer func() { s.gpu.close() }() // the probe a per-block allocation renewed, if it did
	s.register(true)
	defer s.register(false)

	if s.m.Capacity != nil {
		err = s.capacity(ctx) // a search over rates instead of fixed-rate blocks (capacity.go)
	} else {
		err = s.blocks(ctx)
	}
	cerr := s.teardown(ctx)
	if err != nil {
		if errors.Is(err, ErrInterrupted) || ctx.Err() != nil {
			return nil, s.interrupted()
		}
		if diskFull(err) {
			return nil, fmt.Errorf("%w\nthe disk holding %s is full; the journal and the runs already recorded are intact; free some space, then continue with: %s", err, s.dir, s.resumeHint())
		}
		return nil, fmt.Errorf("%w\nthe sweep stopped; the journal and the runs already recorded are intact; once this is fixed, continue with: %s", err, s.resumeHint())
	}
	if cerr != nil {
		s.logf("warning: teardown: %v", cerr)
	}
	rep, err := exportReport(ctx, s.dir, ExportOverrides{})
	if err != nil {
		if ctx.Err() != nil {
			return nil, s.interrupted()
		}
		if diskFull(err) {
			return nil, fmt.Errorf("export: %w\nthe disk holding %s is full; every run is recorded; free some space, then run: mbench export %s", err, s.dir, s.dir)
		}
		return nil, fmt.Errorf("export: %w", err)
	}
	o := &Outcome{Dir: s.dir, Report: filepath.Join(s.dir, "report.md"), Removed: s.state.Removed, Verdicts: results.VerdictCounts{}}
	if s.state.Stop != nil {
		o.StopReason = s.state.Stop.Reason
	}
	for k, e := range s.ledger.runs {
		if _, ok := s.cells[k.cell]; !ok {
			continue // a removed cell's run
		}
		o.Verdicts[e.Status]++
	}
	o.Unusable = unusableCells(rep, s.ledger.runs)
	if s.m.Capacity != nil { // probes beyond the capacity are meant to fail: only undecided searches are not results
		o.Unusable = capacityUnusable(s.dir)
	}
	return o, nil
}

// teardown stops the engines and closes the hosts. After an interrupt it is
// bounded (the user was promised a prompt exit): the SIGTERM grace is cut so
// that SIGKILL and its check still fit in interruptTeardown.
func (s *Sweep) teardown(ctx context.Context) error {
	tctx := context.WithoutCancel(ctx)
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		tctx, cancel = context.WithTimeout(tctx, interruptTeardown)
		defer cancel()
	}
	return s.closeAll(tctx)
}

// interruptTeardown bounds the engine teardown after Ctrl-C.
const interruptTeardown = 7 * time.Second

func (s *Sweep) interrupted() error {
	return fmt.Errorf("%w; engines stopped; continue with: %s", ErrInterrupted, s.resumeHint())
}

func (s *Sweep) resumeHint() string {
	if s.opts.ResumeHint != "" {
		return s.opts.ResumeHint
	}
	return "mbench resume " + matrices.ShellQuote(s.dir)
}

// unusableCells names the cells of rep with no usable run, with the
// verdicts of the runs they had.
func unusableCells(rep *results.Report, journal map[runKey]JournalEntry) []string {
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
