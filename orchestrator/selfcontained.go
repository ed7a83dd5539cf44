package orchestrator

// A results directory that stands on its own: a copy of its matrix, and a
// check on resume that every journaled run's files are still there.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/mbench/mbench/internal/durable"
	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/results/sweepdir"
)

// matrixCopyName is the matrix's copy inside a results directory.
const matrixCopyName = "matrix.yaml"

// keepMatrixCopy writes the matrix file, its secret fields redacted, into
// the results directory and records it in the sweep state.
func (st *store) keepMatrixCopy(m *matrices.Matrix) error {
	data, redacted, err := m.RedactedSource()
	if err != nil {
		return fmt.Errorf("copy the matrix into the results directory: %w", err)
	}
	if err := durable.WriteFile(filepath.Join(st.dir, matrixCopyName), data, 0o644); err != nil {
		return fmt.Errorf("copy the matrix into the results directory: %w", err)
	}
	st.state.MatrixCopy, st.state.MatrixSecrets = matrixCopyName, redacted
	return nil
}

// resumeMatrix loads the matrix a resume continues with: override when
// given, else the recorded file, else (the directory was moved, or the file
// is gone) the directory's own copy. Whatever it loads must resolve to the
// recorded matrix hash.
func resumeMatrix(dir string, st *SweepState, override string) (*matrices.Matrix, error) {
	path, from := st.MatrixFile, "the sweep's matrix"
	switch {
	case override != "":
		path, from = override, "--matrix"
	case st.MatrixCopy != "":
		if _, err := os.Stat(st.MatrixFile); errors.Is(err, fs.ErrNotExist) {
			if st.MatrixSecrets {
				return nil, fmt.Errorf("the matrix %s is gone and the directory's copy has its secret values redacted; give the matrix with --matrix FILE", st.MatrixFile)
			}
			path, from = filepath.Join(dir, st.MatrixCopy), "the results directory's copy of the matrix"
		}
	}
	m, err := matrices.Load(path)
	if err != nil {
		return nil, fmt.Errorf("reload %s: %w", from, err)
	}
	if m.Hash != st.MatrixHash {
		if override != "" {
			return nil, fmt.Errorf("--matrix %s is not the matrix the sweep ran (its hash differs); to continue with an edited matrix run: mbench run %s --out %s", override, override, dir)
		}
		return nil, fmt.Errorf("the matrix %s changed since the sweep started; to continue with the edited matrix run: mbench run %s --out %s", path, path, dir)
	}
	return m, nil
}

// verifyRuns checks the files of every journaled run that should have them
// (every verdict but failed and host_lost): a run whose directory or summary_A.json is
// missing or unreadable, or whose summary is not that run's (its cell, block
// and verdict are not the journal line's: a summary replaced by {} names
// none), loses its journal line, and its directory (if any)
// is moved aside, so the sweep redoes it. redo names those runs, each with
// what was wrong.
func (st *store) verifyRuns() (redo []string, err error) {
	entries, torn, err := readJournal(st.dir)
	if err != nil {
		return nil, err
	}
	var keep []JournalEntry
	for _, e := range entries {
		if e.Status == results.VerdictFailed || e.Status == results.VerdictHostLost {
			keep = append(keep, e)
			continue
		}
		if problem := runFilesProblem(st.dir, e); problem != "" {
			redo = append(redo, fmt.Sprintf("%s b%d (%s)", e.Cell, e.Block, problem))
			if filepath.IsLocal(e.Dir) {
				if err := moveAside(filepath.Join(st.dir, e.Dir)); err != nil {
					return nil, err
				}
			}
			continue
		}
		keep = append(keep, e)
	}
	if len(redo) == 0 && !torn {
		return nil, nil
	}
	if err := repairJournal(st.dir, keep); err != nil {
		return nil, fmt.Errorf("rewrite the journal: %w", err)
	}
	sort.Strings(redo)
	return redo, nil
}

// runFilesProblem says what is wrong with a journaled run's files, "" when
// nothing is.
func runFilesProblem(dir string, e JournalEntry) string {
	if !filepath.IsLocal(e.Dir) {
		return "its directory is outside the sweep"
	}
	sum, err := sweepdir.ReadRunSummary(filepath.Join(dir, e.Dir, "summary_A.json"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, derr := os.Stat(filepath.Join(dir, e.Dir)); errors.Is(derr, fs.ErrNotExist) {
			return "its directory is missing"
		}
		return "summary_A.json is missing"
	case err != nil:
		return "summary_A.json is unreadable"
	case sum.Cell != e.Cell:
		return fmt.Sprintf("summary_A.json names cell %q, not %s", sum.Cell, e.Cell)
	case sum.Block != e.Block:
		return fmt.Sprintf("summary_A.json names block %d, not %d", sum.Block, e.Block)
	case sum.Verdict != e.Status:
		return fmt.Sprintf("summary_A.json's verdict %q is not the journal's %s", sum.Verdict, e.Status)
	}
	return ""
}
