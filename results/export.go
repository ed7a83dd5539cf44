package results

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mbench/mbench/internal/durable"
)

// ExportInput describes a (possibly partial) sweep directory for Export:
// what was planned, what ran, and the method to analyse it with.
type ExportInput struct {
	Dir        string  // the sweep directory; run directories are relative to it
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
	StopReason         string // why the sweep stopped, in words ("" when it has not)
	Blocks             int    // blocks planned or finished; 0 means the largest block in Runs
	Env                map[string]string
	Simulated          bool                // the engine is simengine: every output says so
	Redact             func(string) string // applied to all text written, when non-nil
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
	// InMemory computes the exports without writing anything under Dir:
	// report.md, tables.csv and the cell summaries go to Report.Contents,
	// and report.html and the plots are not made. A read-only export (of a
	// live sweep, or with overrides of the recorded method) uses it.
	InMemory bool
	// Capacity is the capacity search's analysis for an InMemory export
	// (nil for a fixed-rate sweep); without InMemory the report reads
	// Dir/capacity.json.
	Capacity *CapacityReport
}

// CellInfo identifies one cell of the matrix. SameAs names the config (or
// cell ID) an A/A control duplicates; its comparison with that original is
// the measured noise floor.
type CellInfo struct {
	ID, Config, Shape string
	Rate              float64
	SameAs            string
}

// RunRef is one journal line: a run of a cell in a block, its directory
// relative to ExportInput.Dir and its verdict. Only runs whose verdict is usable
// (ok) count in the statistics; the others are listed with their reason.
type RunRef struct {
	Cell   string
	Block  int
	Dir    string
	Status Verdict
	Reason string
	// Position is the run's 1-based position in its block's order (0:
	// unknown); the nuisance fit of the position effect uses it.
	Position int
}

// Report is what Export wrote and found.
type Report struct {
	Dir         string          // the sweep directory
	Files       []string        // files written, relative to Dir, sorted
	Cells       []CellSummary   // in the order of ExportInput.Cells
	Comparisons []ComparisonRow // config vs baseline
	NoiseFloor  []ComparisonRow // A/A control vs its original
	Nuisance    []Nuisance      // the position-in-block effect per compared metric
	Warnings    []string        // problems that did not stop the export
	// Contents holds what an InMemory export made, by path relative to Dir
	// (report.md, tables.csv, cells/<id>/summary_A.json).
	Contents map[string][]byte
	dropped  int // comparisons a capacity search's report leaves out (no baseline probe at their rate)
}

// ComparisonRow is one comparison of a table: Config's cell against the
// baseline's cell at the same shape and rate, for one metric.
type ComparisonRow struct {
	Metric   string  `json:"metric"` // as the user named it (ttft_p90)
	Key      string  `json:"key"`    // RunMetrics key (p90_ttft_ms)
	Config   string  `json:"config"`
	Baseline string  `json:"baseline"`
	Shape    string  `json:"shape"`
	Rate     float64 `json:"rate"`
	Cell     string  `json:"cell"`
	BaseCell string  `json:"base_cell"`      // "" when the baseline cell is missing
	Note     string  `json:"note,omitempty"` // why no comparison was possible, when a side has no data
	Comparison
}

// Text is the formatted comparison, or "n/a (why)" when a side has no data.
func (r ComparisonRow) Text() string {
	if r.Note != "" {
		return "n/a (" + r.Note + ")"
	}
	return r.Comparison.String()
}

// runData is one RunRef with what was read for it.
type runData struct {
	Ref     RunRef
	Sum     *RunSummary
	Metrics map[string]float64
	Problem string // why the run is not used, when it is not
}

// cellData gathers one cell's runs.
type cellData struct {
	Info CellInfo
	Runs []*runData       // every run of the cell, by block then dir
	Used map[int]*runData // block → the run used for it
	Sum  CellSummary
}

// Export reads every run's summary_A.json and writes, under s.Dir, the cell
// summaries (cells/<id>/summary_A.json), report.md, report.html (html.go),
// tables.csv, instances.csv and plots/.
// Every file is written atomically. It works on partial sweeps: missing
// cells, blocks and unreadable summaries are reported in the files and in
// Report.Warnings; only bad arguments and write failures are errors.
func Export(ctx context.Context, s ExportInput) (*Report, error) {
	if s.Dir == "" {
		return nil, errors.New("export: sweep directory not set")
	}
	if s.Confidence == 0 {
		s.Confidence = 0.95
	}
	if !(s.Confidence > 0 && s.Confidence < 1) {
		return nil, fmt.Errorf("export: confidence %v must be between 0 and 1", s.Confidence)
	}
	if len(s.Compare) == 0 {
		s.Compare = DefaultCompare
	}
	if s.Metric == "" {
		s.Metric = DefaultStopMetric
	}
	rep := &Report{Dir: s.Dir}
	cells, err := loadCells(ctx, &s, rep)
	if err != nil {
		return nil, err
	}
	withSLOCompare(&s, cells)
	w := &writer{s: &s, rep: rep}
	for _, c := range cells {
		rep.Cells = append(rep.Cells, c.Sum)
		b, err := encodeJSON(redactCell(c.Sum, s.redact))
		if err != nil {
			return nil, fmt.Errorf("export: encode cell %s: %w", c.Info.ID, err)
		}
		if err := w.write(filepath.Join("cells", c.Info.ID, "summary_A.json"), b); err != nil {
			return nil, err
		}
	}
	rep.Comparisons, rep.NoiseFloor, rep.Nuisance = comparisons(&s, cells)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if err := w.write("report.md", []byte(s.redact(renderReport(&s, cells, rep)))); err != nil {
		return nil, err
	}
	if !s.InMemory {
		page, err := renderHTML(ctx, &s, cells, rep)
		if err != nil {
			return nil, err
		}
		if err := w.write("report.html", page); err != nil {
			return nil, err
		}
	}
	csvText, err := renderCSV(&s, cells)
	if err != nil {
		return nil, err
	}
	if err := w.write("tables.csv", csvText); err != nil {
		return nil, err
	}
	instText, err := renderInstancesCSV(&s, cells)
	if err != nil {
		return nil, err
	}
	if err := w.write("instances.csv", instText); err != nil {
		return nil, err
	}
	if !s.InMemory {
		if err := writePlots(ctx, &s, cells, w); err != nil {
			return nil, err
		}
	}
	for _, c := range cells {
		for _, r := range c.Runs {
			if r.Problem != "" && r.Ref.Status.Usable() {
				rep.warn("cell %s block %d (%s): %s", r.Ref.Cell, r.Ref.Block, r.Ref.Dir, r.Problem)
			}
		}
	}
	sort.Strings(rep.Files)
	return rep, nil
}

// redact applies the sweep's redactor.
func (s *ExportInput) redact(text string) string {
	if s.Redact == nil {
		return text
	}
	return s.Redact(text)
}

// writer writes files under the sweep directory and records them.
type writer struct {
	s   *ExportInput
	rep *Report
}

// write writes rel (relative to the sweep directory) atomically, or, for
// an InMemory export, keeps it in Report.Contents.
func (w *writer) write(rel string, data []byte) error {
	if w.s.InMemory {
		if w.rep.Contents == nil {
			w.rep.Contents = map[string][]byte{}
		}
		w.rep.Contents[filepath.ToSlash(rel)] = data
		return nil
	}
	path := filepath.Join(w.s.Dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := durable.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	w.rep.Files = append(w.rep.Files, filepath.ToSlash(rel))
	return nil
}

// warn records a problem that does not stop the export.
func (r *Report) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

// loadCells reads the runs of every cell and computes the cell summaries.
func loadCells(ctx context.Context, s *ExportInput, rep *Report) ([]*cellData, error) {
	byID := map[string]*cellData{}
	var cells []*cellData
	for _, ci := range s.Cells {
		if !filepath.IsLocal(ci.ID) || filepath.Base(ci.ID) != ci.ID {
			return nil, fmt.Errorf("export: cell ID %q is not a plain file name", ci.ID)
		}
		if byID[ci.ID] != nil {
			return nil, fmt.Errorf("export: cell %s listed twice", ci.ID)
		}
		c := &cellData{Info: ci, Used: map[int]*runData{}}
		byID[ci.ID] = c
		cells = append(cells, c)
	}
	blocks := s.Blocks
	refs := append([]RunRef(nil), s.Runs...)
	sort.SliceStable(refs, func(i, j int) bool {
		if refs[i].Cell != refs[j].Cell {
			return refs[i].Cell < refs[j].Cell
		}
		if refs[i].Block != refs[j].Block {
			return refs[i].Block < refs[j].Block
		}
		return refs[i].Dir < refs[j].Dir
	})
	for _, ref := range refs {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("export: %w", err)
		}
		if s.Blocks == 0 && ref.Block > blocks {
			blocks = ref.Block
		}
		c := byID[ref.Cell]
		if c == nil {
			rep.warn("run %s (block %d) belongs to no cell of the sweep; ignored", ref.Dir, ref.Block)
			continue
		}
		r := &runData{Ref: ref}
		c.Runs = append(c.Runs, r)
		switch {
		case ref.Status == VerdictFailed:
			r.Problem = "run failed"
		case !filepath.IsLocal(ref.Dir):
			r.Problem = fmt.Sprintf("run directory %q is outside the sweep", ref.Dir)
		default:
			sum, err := ReadRunSummary(filepath.Join(s.Dir, ref.Dir, "summary_A.json"))
			if errors.Is(err, fs.ErrNotExist) {
				r.Problem = "its summary_A.json is missing"
				break
			}
			if err != nil { // name the file relative to the sweep, not the machine
				r.Problem = strings.ReplaceAll(err.Error(), s.Dir+string(filepath.Separator), "")
				break
			}
			r.Sum, r.Metrics = sum, RunMetrics(sum)
			if !ref.Status.Usable() {
				// Read for what it tells (saturation, errors by class), but
				// not a result.
				r.Problem = "run " + string(ref.Status)
				break
			}
			if prev := c.Used[ref.Block]; prev != nil {
				rep.warn("cell %s block %d has two usable runs (%s, %s); using %s", ref.Cell, ref.Block, prev.Ref.Dir, ref.Dir, ref.Dir)
				prev.Problem = "superseded by " + ref.Dir
			}
			c.Used[ref.Block] = r
		}
	}
	for _, c := range cells {
		c.Sum = summarizeCell(c, s, blocks)
	}
	return cells, nil
}

// lastBlock is the sweep's last block: Blocks when set, else the largest
// block of its runs.
func (s *ExportInput) lastBlock() int {
	if s.Blocks > 0 {
		return s.Blocks
	}
	last := 0
	for _, r := range s.Runs {
		last = max(last, r.Block)
	}
	return last
}
