package orchestrator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/mbench/mbench/results"
)

// Status is where a sweep stands, read without its lock: what mbench
// status prints.
type Status struct {
	Dir       string `json:"dir"`
	Name      string `json:"name"`
	SweepID   string `json:"sweep_id"`
	Simulated bool   `json:"simulated"`
	// Holder is the process running the sweep now; nil when none holds
	// the directory.
	Holder *LockHolder `json:"running,omitempty"`
	// Stop is why the sweep stopped; "" while it runs or when it was left
	// partial.
	Stop      string `json:"stop,omitempty"`
	Converged bool   `json:"converged"`
	Cells     int    `json:"cells"`
	// Blocks are the blocks planned so far; Complete those in which every
	// cell planned has a journaled run; MaxBlocks is repeat.max.
	Blocks    int `json:"blocks_planned"`
	Complete  int `json:"blocks_complete"`
	MaxBlocks int `json:"max_blocks,omitempty"`
	// Runs counts the journaled runs by verdict (host_lost: those not run
	// again since); Last is the latest line.
	Runs results.VerdictCounts `json:"runs"`
	Last *JournalEntry         `json:"last_run,omitempty"`
	// Torn: the journal's last line is incomplete (being written, or left
	// by a crash); that run is not counted.
	Torn bool `json:"journal_torn,omitempty"`
}

// ReadStatus reads the sweep in dir: sweep.json, the journal and the lock's
// holder. It takes no lock and writes nothing, so it reads a sweep that is
// running, and a directory on a read-only file system.
func ReadStatus(dir string) (*Status, error) {
	st, err := ReadSweep(dir)
	if err != nil {
		return nil, err
	}
	entries, torn, err := readJournal(dir)
	if err != nil {
		return nil, err
	}
	s := &Status{Dir: dir, Name: st.Name, SweepID: st.SweepID, Simulated: st.Simulated, Cells: len(st.Cells),
		Blocks: len(st.Blocks), Runs: results.VerdictCounts{}, Torn: torn}
	if st.Stop != nil {
		s.Stop, s.Converged = st.Stop.Reason, st.Stop.Converged
	}
	if rm, err := resolvedMethod(st); err == nil {
		s.MaxBlocks = rm.Repeat.Max
	}
	done := journalIndex(entries)
	for _, e := range done {
		s.Runs[e.Status]++
	}
	for _, e := range entries {
		if _, ran := done[runKey{e.Cell, e.Block}]; e.Status == results.VerdictHostLost && !ran {
			s.Runs[e.Status]++ // not run again yet
		}
	}
	if len(entries) > 0 {
		s.Last = new(entries[len(entries)-1])
	}
	for _, b := range st.Blocks {
		notRun := func(id string) bool {
			_, ran := done[runKey{id, b.Block}]
			return !ran
		}
		if len(b.Order) > 0 && !slices.ContainsFunc(b.Order, notRun) {
			s.Complete++
		}
	}
	if s.Holder, err = lockHolder(dir); err != nil {
		return nil, err
	}
	return s, nil
}

// lockHolder is the process that holds dir's lock, nil when none does. It
// probes with a shared, non-blocking flock on a read-only descriptor, given
// back at once: it never waits and never writes the lock file.
func lockHolder(dir string) (*LockHolder, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the lock of %s: %w", dir, err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return nil, nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, fmt.Errorf("read the lock of %s: %w", dir, err)
	}
	h := &LockHolder{}
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, h)
	}
	return h, nil
}

// Text is the status in words, a few lines.
func (s *Status) Text() string {
	state := "partial: not running (continue it with mbench resume " + s.Dir + ")"
	switch {
	case s.Holder != nil && s.Holder.PID != 0:
		state = fmt.Sprintf("running: pid %d on %s since %s (%s)", s.Holder.PID, s.Holder.Host, s.Holder.Since.Local().Format(time.DateTime), s.Holder.Command)
	case s.Holder != nil:
		state = "running (the lock's holder did not record itself)"
	case s.Stop != "":
		state = "stopped: " + s.Stop
	}
	sim := ""
	if s.Simulated {
		sim = " (SIMULATED engine)"
	}
	out := fmt.Sprintf("sweep %s%s in %s\n%s\n", s.Name, sim, s.Dir, state)
	max := ""
	if s.MaxBlocks > 0 {
		max = fmt.Sprintf(" (at most %d)", s.MaxBlocks)
	}
	out += fmt.Sprintf("blocks: %d complete of %d planned%s; %d cells\n", s.Complete, s.Blocks, max, s.Cells)
	out += fmt.Sprintf("runs: %d journaled: %s\n", s.Runs.Total(), s.Runs)
	if s.Last != nil {
		out += fmt.Sprintf("last run: %s b%d %s at %s\n", s.Last.Cell, s.Last.Block, s.Last.Status, s.Last.Finished.Local().Format(time.DateTime))
	}
	if s.Torn {
		out += "the journal's last line is incomplete (a run being journaled, or one a crash cut off): not counted\n"
	}
	return out
}
