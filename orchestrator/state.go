package orchestrator

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/mbench/mbench/internal/durable"
	"github.com/mbench/mbench/orchestrator/internal/plan"
	"github.com/mbench/mbench/results"
)

// sweepFile is the name of the sweep record inside a results directory.
const sweepFile = "sweep.json"

// DesignWilliams is sweep.json's design kind (design.kind) of a randomized
// sweep: Williams squares taken as mirror-image pairs of blocks.
const DesignWilliams = plan.DesignWilliams

// journalFile is the name of the append-only journal of finished runs.
const journalFile = "journal.jsonl"

// SweepState is the content of sweep.json: everything needed to continue a
// sweep exactly as planned, and to refuse mixing results from another
// environment.
type SweepState struct {
	Format     int    `json:"format"`
	SweepID    string `json:"sweep_id"`
	Name       string `json:"name"`
	MatrixFile string `json:"matrix_file"`
	MatrixHash string `json:"matrix_hash"`
	// MatrixCopy is the copy of the matrix file inside the results
	// directory (relative to it), so a moved directory can resume; its
	// secret values are replaced by *** (MatrixSecrets says there were some).
	MatrixCopy    string             `json:"matrix_copy,omitempty"`
	MatrixSecrets bool               `json:"matrix_has_secrets,omitempty"`
	Resolved      json.RawMessage    `json:"resolved"`
	Seed          int64              `json:"seed"`
	Randomize     bool               `json:"randomize"`
	Cells         []results.CellInfo `json:"cells"`
	Removed       []results.CellInfo `json:"removed_cells,omitempty"`
	Blocks        []plan.Block       `json:"blocks"`
	Fingerprint   map[string]string  `json:"fingerprint"`
	Created       time.Time          `json:"created"`
	Updated       time.Time          `json:"updated"`
	Stop          *StopRecord        `json:"stop,omitempty"`
	Simulated     bool               `json:"simulated"`
	// Design is how the block orders were made and how balanced the
	// planned blocks are (rewritten with every planned block).
	Design *plan.Design `json:"design,omitempty"`
	// Stage1 is the number of first-stage blocks (repeat.min when the sweep
	// was planned): the stopping rule projects the comparisons' CIs from
	// their spread. 0 in sweeps recorded before the two-stage rule.
	Stage1 int `json:"stage1_blocks,omitempty"`
	// CapacityRounds are a capacity search's rounds as planned, each
	// recorded before its runs start (plan.Round).
	CapacityRounds []plan.Round `json:"capacity_rounds,omitempty"`
}

// StopRecord says why the sweep stopped and how close each cell came to the
// target noise floor.
type StopRecord struct {
	Reason    string             `json:"reason"`
	Blocks    int                `json:"blocks"`
	RelHalf   map[string]float64 `json:"rel_half_width"`
	Target    float64            `json:"target_rel_ci"`
	Metric    string             `json:"metric"`
	Converged bool               `json:"converged"`
	// The stopping rule on the comparisons: every paired comparison's CI
	// half-width (a fraction, 0.05 = ±5%) on the primary metric, keyed
	// "config vs baseline @ rate shape", with the first-stage blocks whose
	// variance sets it.
	Primary      string             `json:"primary_metric,omitempty"`
	CompHalf     map[string]float64 `json:"comparison_half_width,omitempty"`
	Stage1Blocks int                `json:"stage1_blocks,omitempty"`
	// RuleStop: the stopping rule ended the sweep (not repeat.max, the
	// budget or dead cells); its comparisons take their spread from the
	// second-stage blocks.
	RuleStop       bool     `json:"stopped_by_rule,omitempty"`
	UnusableCompar []string `json:"comparisons_without_usable_runs,omitempty"`
}

// JournalEntry is one line of journal.jsonl. A run without a journal line did
// not happen, nor did one journaled host_lost: resume redoes it, and the
// later line supersedes the host_lost one.
type JournalEntry struct {
	results.RunRef           // the run: cell, block, verdict, directory, reason
	Started        time.Time `json:"started"`
	Finished       time.Time `json:"finished"`
	// Self is mbench's own footprint when the run was journaled, so that
	// growth over a long sweep (a leak) shows in the journal.
	Self *SelfUsage `json:"mbench,omitempty"`
	// Nodes says where the run's slurm hosts ran: "host: slurm job J node N
	// (cluster C)".
	Nodes []string `json:"nodes,omitempty"`
	// Attempt numbers a run of the cell in the block run again in place
	// (after client_limited attempts, which Superseded lists: their
	// directories and reasons); 0 for a first attempt. Only the last
	// attempt is journaled, so a run keeps one line.
	Attempt    int            `json:"attempt,omitempty"`
	Superseded []AttemptEntry `json:"superseded,omitempty"`
}

// AttemptEntry is an attempt of a run that was run again in place.
type AttemptEntry struct {
	Dir    string          `json:"dir"`
	Status results.Verdict `json:"status"`
	Reason string          `json:"reason,omitempty"`
}

// SelfUsage is the mbench process's resident memory, open descriptors and
// goroutines at one instant.
type SelfUsage struct {
	RSSKiB     int64 `json:"rss_kib"`
	FDs        int   `json:"fds"`
	Goroutines int   `json:"goroutines"`
}

func writeSweep(dir string, st *SweepState) error {
	st.Updated = time.Now().UTC()
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", sweepFile, err)
	}
	return durable.WriteFile(filepath.Join(dir, sweepFile), append(data, '\n'), 0o644)
}

// ReadSweep reads dir/sweep.json.
func ReadSweep(dir string) (*SweepState, error) {
	path := filepath.Join(dir, sweepFile)
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: not a sweep directory (no %s): %w", dir, sweepFile, err)
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var st SweepState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s: corrupt sweep record: %w", path, err)
	}
	return &st, nil
}

// readJournal reads dir/journal.jsonl. A torn last line (a crash during the
// append) is ignored and reported through torn; any other bad line is an
// error naming the line.
func readJournal(dir string) (entries []JournalEntry, torn bool, err error) {
	path := filepath.Join(dir, journalFile)
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	line := 0
	var bad []int
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var e JournalEntry
		if err := json.Unmarshal(b, &e); err != nil || e.Cell == "" {
			bad = append(bad, line)
			continue
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	switch {
	case len(bad) == 0:
	case len(bad) == 1 && bad[0] == line:
		torn = true
	default:
		return nil, false, fmt.Errorf("%s:%d: malformed journal line", path, bad[0])
	}
	return entries, torn, nil
}

// journalIndex maps (cell, block) to its entry; the first line wins, so a
// duplicate can never double-count a run. A host_lost line is no run (its
// host stopped answering): it is left out, so the run is done again.
func journalIndex(entries []JournalEntry) map[runKey]JournalEntry {
	m := make(map[runKey]JournalEntry, len(entries))
	for _, e := range entries {
		if e.Status == results.VerdictHostLost {
			continue
		}
		k := runKey{e.Cell, e.Block}
		if _, ok := m[k]; !ok {
			m[k] = e
		}
	}
	return m
}

type runKey struct {
	cell  string
	block int
}

// repairJournal rewrites a journal whose last line was torn by a crash,
// keeping every whole line, so later appends start on a fresh line.
func repairJournal(dir string, entries []JournalEntry) error {
	var out []byte
	for _, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		out = append(append(out, b...), '\n')
	}
	return durable.WriteFile(filepath.Join(dir, journalFile), out, 0o644)
}
