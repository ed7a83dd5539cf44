package results

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Sweep is a (possibly partial) sweep as the analysis takes it: what was
// planned, what ran, the method to analyse it with, and what its report
// says of it besides the numbers.
type Sweep struct {
	Name       string  // title of the report
	Baseline   string  // config every other config is compared with
	Confidence float64 // of CIs and tests; 0 means 0.95
	// RecordedConfidence is the confidence the sweep ran at, when an export
	// analyses it at another (Confidence): the stopping rule decided at it,
	// and the method says so. 0: Confidence.
	RecordedConfidence float64
	Compare            []string // metrics compared with the baseline; nil means DefaultCompare
	Metric             string   // the declared primary metric (repeat.metric): one Holm family, the one the stopping rule targets; "" means DefaultStopMetric
	RelCI              float64  // stopping-rule target relative half-width (0: none shown)
	Cells              []CellInfo
	Runs               []RunRef
	// Superseded are runs run again in place (after a client_limited
	// verdict): the report says so; only the last attempt, in Runs, counts.
	Superseded []RunRef
	StopReason string // why the sweep stopped, in words ("" when it has not)
	Blocks     int    // blocks planned or finished; 0 means the largest block in Runs
	Env        map[string]string
	Simulated  bool // the engine is simengine: every output says so
	// Overrides are the changes to the recorded method asked for at export
	// (a confidence, a baseline), in words; the report states them.
	Overrides []string
	// Stage1 is the number of first-stage blocks of the two-stage design
	// (repeat.min), which plan the sweep; 0 makes every comparison an
	// ordinary paired t.
	Stage1 int
	// RuleStop: the stopping rule ended the sweep (every comparison within
	// target before repeat.max): comparisons take their spread from the
	// blocks after the first stage.
	RuleStop bool
	// Design says in words how the block orders were made and how balanced
	// they are ("" when not recorded).
	Design string
	// Capacity is the capacity search's analysis (capacity.json), nil for a
	// fixed-rate sweep; CapacityErr says why a capacity.json that exists
	// could not be read (the report says so in its place).
	Capacity    *CapacityReport
	CapacityErr error
}

// CellInfo identifies one cell of the matrix, as sweep.json records it
// (hence the JSON tags): its config, rate and shape by name. SameAs names
// the config (or cell ID) an A/A control duplicates; its comparison with
// that original is the measured noise floor.
type CellInfo struct {
	ID     string  `json:"id"` // stable hash of the resolved cell spec
	Config string  `json:"config"`
	Rate   float64 `json:"rate"`
	Shape  string  `json:"shape"`
	SameAs string  `json:"same_as,omitempty"`
	// Attempt > 0: a capacity probe's re-run of its blocks without a
	// usable run.
	Attempt int `json:"attempt,omitempty"`
}

// RunRef is a run of a cell in a block: its directory relative to the
// sweep directory and its verdict, as the journal records it (the first
// fields of a journal.jsonl line, hence the JSON tags). Only runs whose
// verdict is usable (ok) count in the statistics; the others are listed
// with their reason.
type RunRef struct {
	Cell   string  `json:"cell"`
	Block  int     `json:"block"`
	Status Verdict `json:"status"` // the run's verdict (Verdicts)
	Dir    string  `json:"dir"`
	Reason string  `json:"reason,omitempty"`
	// Position is the run's 1-based position in its block's order (0:
	// unknown); the nuisance fit of the position effect uses it. Not
	// journaled: the export takes it from sweep.json's blocks.
	Position int `json:"-"`
}

// RunFile is what was read of one run's directory for the analysis.
type RunFile struct {
	Sum *RunSummary // its summary_A.json; nil when it was not read
	// Problem says why there is no summary: missing, unreadable, a
	// directory outside the sweep ("" when read, and for a failed run,
	// which is not read).
	Problem string
	// TTFTs is the TTFT (ms) of each completed measured request by id, from
	// its requests.jsonl: the class comparisons pair requests by id. Read
	// for the usable runs with request classes; nil otherwise, and when the
	// file could not be read.
	TTFTs map[int]float64
}

// Run is one RunRef with what was read for it.
type Run struct {
	Ref     RunRef
	Sum     *RunSummary
	Metrics map[string]float64
	Problem string          // why the run is not used, when it is not
	TTFTs   map[int]float64 // RunFile.TTFTs
}

// IsResult reports whether the run counts in the statistics: its verdict
// is usable and its summary was read without a problem.
func (r *Run) IsResult() bool {
	return r.Problem == "" && r.Sum != nil && r.Ref.Status.Usable()
}

// Cell gathers one cell's runs.
type Cell struct {
	Info CellInfo
	Runs []*Run       // every run of the cell, by block then dir
	Used map[int]*Run // block → the run used for it
	Sum  CellSummary
}

// Analysis is a sweep analysed: its cells with their runs and summaries,
// the comparisons with the baseline and the A/A noise floor, the position
// effect, the per-class comparisons, and the problems found on the way.
// Everything a report, a table or a plot shows is drawn from it.
type Analysis struct {
	// Sweep is the sweep as analysed: the defaults filled in, and the SLO
	// metrics added to Compare when the runs have them.
	Sweep       Sweep
	Cells       []*Cell         // in the order of Sweep.Cells
	Ordered     []*Cell         // in table order (shape, rate, baseline first, configs in matrix order)
	Comparisons []ComparisonRow // config vs baseline
	NoiseFloor  []ComparisonRow // A/A control vs its original
	Nuisance    []Nuisance      // the position-in-block effect per compared metric
	Classes     []ClassComparison
	Warnings    []string // problems that did not stop the analysis
}

// Analyze analyses sw. It reads nothing itself: read gives it what was
// read of a run, and is called once for each run of a listed cell that did
// not fail, in the order cell, block, directory; an error from read (a
// canceled context) stops the analysis. It works on partial sweeps:
// missing cells, blocks and unreadable summaries are in the cells and in
// Warnings; only bad arguments and read's errors are errors.
func Analyze(sw Sweep, read func(RunRef) (RunFile, error)) (*Analysis, error) {
	sw.Confidence = cmp.Or(sw.Confidence, 0.95)
	if !(sw.Confidence > 0 && sw.Confidence < 1) {
		return nil, fmt.Errorf("confidence %v must be between 0 and 1", sw.Confidence)
	}
	if len(sw.Compare) == 0 {
		sw.Compare = DefaultCompare
	}
	sw.Metric = cmp.Or(sw.Metric, DefaultStopMetric)
	a := &Analysis{Sweep: sw}
	s := &a.Sweep
	cells, err := a.cells(read)
	if err != nil {
		return nil, err
	}
	withSLOCompare(s, cells)
	a.Cells, a.Ordered = cells, cellOrder(s, cells)
	a.Comparisons, a.NoiseFloor, a.Nuisance = comparisons(s, cells)
	a.Classes = classComparisons(s, cells)
	return a, nil
}

// warn records a problem that does not stop the analysis.
func (a *Analysis) warn(format string, args ...any) {
	a.Warnings = append(a.Warnings, fmt.Sprintf(format, args...))
}

// cells sorts the runs into their cells, picks the run used for each block
// and computes the cell summaries.
func (a *Analysis) cells(read func(RunRef) (RunFile, error)) ([]*Cell, error) {
	s := &a.Sweep
	byID := map[string]*Cell{}
	var cells []*Cell
	for _, ci := range s.Cells {
		if !filepath.IsLocal(ci.ID) || filepath.Base(ci.ID) != ci.ID {
			return nil, fmt.Errorf("cell ID %q is not a plain file name", ci.ID)
		}
		if byID[ci.ID] != nil {
			return nil, fmt.Errorf("cell %s listed twice", ci.ID)
		}
		c := &Cell{Info: ci, Used: map[int]*Run{}}
		byID[ci.ID] = c
		cells = append(cells, c)
	}
	refs := slices.Clone(s.Runs)
	slices.SortStableFunc(refs, func(a, b RunRef) int {
		return cmp.Or(strings.Compare(a.Cell, b.Cell), cmp.Compare(a.Block, b.Block), strings.Compare(a.Dir, b.Dir))
	})
	for _, ref := range refs {
		c := byID[ref.Cell]
		if c == nil {
			a.warn("run %s (block %d) belongs to no cell of the sweep; ignored", ref.Dir, ref.Block)
			continue
		}
		r := &Run{Ref: ref}
		c.Runs = append(c.Runs, r)
		if ref.Status == VerdictFailed {
			r.Problem = "run failed"
			continue
		}
		f, err := read(ref)
		if err != nil {
			return nil, err
		}
		switch {
		case f.Sum == nil:
			r.Problem = cmp.Or(f.Problem, "its summary_A.json is missing")
		default:
			r.Sum, r.Metrics, r.TTFTs = f.Sum, RunMetrics(f.Sum), f.TTFTs
			if !ref.Status.Usable() {
				// Read for what it tells (saturation, errors by class), but
				// not a result.
				r.Problem = "run " + string(ref.Status)
				break
			}
			if prev := c.Used[ref.Block]; prev != nil {
				a.warn("cell %s block %d has two usable runs (%s, %s); using %s", ref.Cell, ref.Block, prev.Ref.Dir, ref.Dir, ref.Dir)
				prev.Problem = "superseded by " + ref.Dir
			}
			c.Used[ref.Block] = r
		}
	}
	blocks := s.lastBlock()
	for _, c := range cells {
		c.Sum = summarizeCell(c, s, blocks)
	}
	return cells, nil
}

// lastBlock is the sweep's last block: Blocks when set, else the largest
// block of its runs.
func (s *Sweep) lastBlock() int {
	if s.Blocks > 0 {
		return s.Blocks
	}
	last := 0
	for _, r := range s.Runs {
		last = max(last, r.Block)
	}
	return last
}

// AnyCellHas reports whether some cell's summary has the metric key.
func AnyCellHas(ordered []*Cell, key string) bool {
	return slices.ContainsFunc(ordered, func(c *Cell) bool {
		_, ok := c.Sum.Metrics[key]
		return ok
	})
}
