package orchestrator

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"sort"

	"github.com/mbench/mbench/internal/durable"
	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/results/sweepdir"
)

// ledger is a sweep's record of its finished runs: the journal (one durable
// line per run, which makes a run done, unless it is host_lost), each
// cell's consecutive failures,
// and the cells given up after failLimit of them. It runs nothing.
type ledger struct {
	dir       string
	failLimit int
	runs      map[runKey]JournalEntry
	fails     map[string]int    // consecutive failed runs per cell
	dead      map[string]string // cells given up, with the last failure's reason
}

// openLedger reads the journal of the results directory dir (repairing a
// line torn by a crash) and replays it, so a resumed sweep knows what is
// done and which cells it had given up on.
func openLedger(dir string, failLimit int) (*ledger, error) {
	entries, torn, err := readJournal(dir)
	if err != nil {
		return nil, err
	}
	if torn {
		if err := repairJournal(dir, entries); err != nil {
			return nil, fmt.Errorf("repair torn journal line: %w", err)
		}
	}
	l := newLedger(dir, failLimit)
	l.runs = journalIndex(entries)
	sorted := append([]JournalEntry(nil), entries...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Finished.Before(sorted[j].Finished) })
	for _, e := range sorted {
		l.count(e)
	}
	return l, nil
}

func newLedger(dir string, failLimit int) *ledger {
	return &ledger{dir: dir, failLimit: failLimit, runs: map[runKey]JournalEntry{}, fails: map[string]int{}, dead: map[string]string{}}
}

// done reports whether the run of cell in block has its journal line.
func (l *ledger) done(cell string, block int) bool {
	_, ok := l.runs[runKey{cell, block}]
	return ok
}

// deadReason is why cell was given up ("the cell failed 3 consecutive
// runs: …"), "" when it was not.
func (l *ledger) deadReason(cell string) string { return l.dead[cell] }

// record appends e to the journal (durably) and counts it. gaveUp reports
// that this failure was the one that gave its cell up.
func (l *ledger) record(e JournalEntry) (gaveUp bool, err error) {
	data, err := json.Marshal(e)
	if err != nil {
		return false, fmt.Errorf("encode journal line: %w", err)
	}
	path := filepath.Join(l.dir, journalFile)
	if err := durable.AppendLine(path, data); err != nil {
		return false, fmt.Errorf("append journal %s: %w", path, err)
	}
	if e.Status == results.VerdictHostLost {
		return false, nil // no run: resume runs it again, and no failure of the cell
	}
	l.runs[runKey{e.Cell, e.Block}] = e
	wasDead := l.dead[e.Cell] != ""
	l.count(e)
	return !wasDead && l.dead[e.Cell] != "", nil
}

// count updates the consecutive failures of e's cell.
func (l *ledger) count(e JournalEntry) {
	if e.Status == results.VerdictHostLost {
		return
	}
	if e.Status != results.VerdictFailed {
		l.fails[e.Cell] = 0
		return
	}
	l.fails[e.Cell]++
	if l.fails[e.Cell] >= l.failLimit && l.dead[e.Cell] == "" {
		l.dead[e.Cell] = fmt.Sprintf("the cell failed %d consecutive runs: %s", l.failLimit, briefReason(e.Reason))
	}
}

// givenUp is each cell of cells given up, "id (config rate=R shape): why",
// in id order.
func (l *ledger) givenUp(cells map[string]matrices.Cell) []string {
	var out []string
	for id, why := range l.dead {
		if c, ok := cells[id]; ok {
			out = append(out, fmt.Sprintf("%s (%s rate=%g %s): %s", id, c.Config, c.Rate, c.Shape, why))
		}
	}
	sort.Strings(out)
	return out
}

// giveUp gives cell up for why (its later runs are skipped), unless it was
// already.
func (l *ledger) giveUp(cell, why string) {
	l.dead[cell] = cmp.Or(l.dead[cell], why)
}

// runValues keeps the metric values read from journaled runs' summaries:
// a run's summary_A.json is read once, not at every stopping check. A nil
// runValues reads every time.
type runValues map[valueKey]float64

type valueKey struct {
	run    runKey
	metric string
}

// get is the metric of the journaled run e, read from its summary_A.json
// under dir; ok is false (and the value NaN) when the summary cannot be
// read or lacks the metric.
func (rv runValues) get(dir string, e JournalEntry, metric string) (float64, bool) {
	k := valueKey{runKey{e.Cell, e.Block}, metric}
	if v, ok := rv[k]; ok {
		return v, !math.IsNaN(v)
	}
	v := math.NaN()
	if sum, err := sweepdir.ReadRunSummary(filepath.Join(dir, e.Dir, "summary_A.json")); err == nil {
		if x, ok := results.RunMetric(sum, metric); ok {
			v = x
		}
	}
	if rv != nil {
		rv[k] = v
	}
	return v, !math.IsNaN(v)
}
