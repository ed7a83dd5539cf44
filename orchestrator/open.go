package orchestrator

// Opening a sweep: a new results directory, one adopted for an edited
// matrix, or one resumed as recorded.

import (
	"cmp"
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
		return nil, dryRun(m, opts)
	}
	out := cmp.Or(opts.Out, defaultOut(m.Name, time.Now()))
	abs, err := filepath.Abs(out)
	if err != nil {
		return nil, fmt.Errorf("results directory %s: %w", out, err)
	}
	matrixAbs, _ := filepath.Abs(matrixPath)
	s := newSweep(m, abs, opts)
	req, err := m.LoadRequest()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("create results directory: %w", err)
	}
	lock, err := lockDir(abs)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	old, err := ReadSweep(abs)
	switch {
	case err == nil:
		removed, err := s.store.adopt(old, m, matrixAbs, fingerprintOf(m, opts.Version), opts.Force)
		if err != nil {
			return nil, err
		}
		for _, c := range removed {
			s.logf("removed cell %s (%s rate=%g %s): its results stay on disk but leave the report", c.ID, c.Config, c.Rate, c.Shape)
		}
	case errors.Is(err, os.ErrNotExist):
		resolved, err := m.Resolved()
		if err != nil {
			return nil, fmt.Errorf("resolve matrix: %w", err)
		}
		s.store.state = &SweepState{Format: 1, SweepID: sweepID(m.Name, abs), Name: m.Name, MatrixFile: matrixAbs,
			MatrixHash: m.Hash, Resolved: resolved, Seed: m.Seed, Randomize: m.Repeat.Randomize,
			Cells: cellRecords(m), Fingerprint: fingerprintOf(m, opts.Version), Created: time.Now().UTC(), Simulated: m.Engine.Kind == matrices.EngineSim,
			Stage1: m.Repeat.Min}
	default:
		return nil, err
	}
	if err := s.store.keepMatrixCopy(m); err != nil {
		return nil, err
	}
	if err := s.store.save(); err != nil {
		return nil, err
	}
	return s.execute(ctx, req)
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
	lock, err := lockDir(abs)
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
	req, err := m.LoadRequest()
	if err != nil {
		return nil, err
	}
	s.store.state = st
	if err := s.store.checkFingerprint(fingerprintOf(m, opts.Version), opts.Force); err != nil {
		return nil, err
	}
	for _, f := range cleanTemps(abs) {
		s.tracef("removed a temporary file left by an interrupted write: %s", f)
	}
	redo, err := s.store.verifyRuns()
	if err != nil {
		return nil, err
	}
	if len(redo) > 0 {
		s.logf("redoing %d runs whose files are missing, unreadable or not that run's: %s", len(redo), strings.Join(redo, "; "))
	}
	return s.execute(ctx, req)
}

// adopt takes over an existing results directory, whose sweep.json is old,
// for m (perhaps edited): an unchanged environment fingerprint is required
// (unless forced); with an edited matrix the recorded blocks are replanned
// over the new cells, runs already journaled keep their results, and the
// cells no longer in the matrix are returned.
func (st *store) adopt(old *SweepState, m *matrices.Matrix, matrixAbs string, fp map[string]string, force bool) ([]results.CellInfo, error) {
	st.state = old
	if err := st.checkFingerprint(fp, force); err != nil {
		return nil, err
	}
	now := cellRecords(m)
	keep := map[string]bool{}
	for _, c := range now {
		keep[c.ID] = true
	}
	removed := slices.DeleteFunc(slices.Clone(old.Cells), func(c results.CellInfo) bool { return keep[c.ID] })
	if old.MatrixHash == m.Hash {
		return nil, st.save()
	}
	resolved, err := m.Resolved()
	if err != nil {
		return nil, err
	}
	old.MatrixHash, old.Resolved, old.MatrixFile = m.Hash, resolved, matrixAbs
	old.Cells, old.Removed = now, append(old.Removed, removed...)
	old.Seed, old.Randomize = m.Seed, m.Repeat.Randomize
	// Re-plan the recorded blocks over the new cell set; runs already in
	// the journal keep their results.
	ids := cellIDs(now)
	for i := range old.Blocks {
		old.Blocks[i].Order = plan.BlockOrder(old.Seed, old.Blocks[i].Block, ids, old.Randomize)
	}
	old.Design = plan.DesignOf(len(old.Cells), old.Randomize, old.Blocks)
	old.Stage1 = cmp.Or(old.Stage1, m.Repeat.Min) // the stopping rule from here on is the two-stage one
	old.Stop = nil
	old.CapacityRounds = nil // a changed search replans its rounds; runs of cells it probes again are kept
	return removed, st.save()
}

func cellRecords(m *matrices.Matrix) []results.CellInfo {
	var out []results.CellInfo
	for _, c := range m.Cells() {
		out = append(out, c.CellInfo)
	}
	return out
}

func cellIDs(cs []results.CellInfo) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

// fingerprintOf is what must not change under the results of a sweep of m
// by this mbench (version) on this machine.
func fingerprintOf(m *matrices.Matrix, version string) map[string]string {
	fp := map[string]string{
		"mbench_version": version,
		"engine_kind":    string(m.Engine.Kind),
		"os_arch":        runtime.GOOS + "/" + runtime.GOARCH,
	}
	var hs []string
	for _, n := range m.HostOrder {
		hs = append(hs, n+"="+m.Hosts[n].Address)
	}
	fp["hosts"] = strings.Join(hs, ",")
	maps.Copy(fp, localGPUFingerprint())
	return fp
}

// checkFingerprint compares the environment now with the one sweep.json
// records, refuses a change unless forced, and records now.
func (st *store) checkFingerprint(now map[string]string, force bool) error {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(now)) {
		if old, ok := st.state.Fingerprint[k]; ok && old != now[k] {
			diffs = append(diffs, fmt.Sprintf("%s: %q → %q", k, old, now[k]))
		}
	}
	if len(diffs) > 0 && !force {
		return fmt.Errorf("%w (%s); refusing to mix results from two environments; use --force to accept", errFingerprint, strings.Join(diffs, "; "))
	}
	if st.state.Fingerprint == nil {
		st.state.Fingerprint = map[string]string{}
	}
	maps.Copy(st.state.Fingerprint, now)
	return nil
}
