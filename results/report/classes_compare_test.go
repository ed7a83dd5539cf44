package report

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/results/sweepdir"

	"github.com/mbench/mbench/results"

	"github.com/mbench/mbench/openloop"
)

// classSweep writes a two-config sweep of three blocks: 20 measured
// requests per run, ids 0-9 WARM and 10-19 HEAVY (by ideal new tokens, the
// same under both configs). The fast config's HEAVY requests take half the
// baseline's TTFT, its WARM ones the same; request 15 fails under fast in
// every block.
func classSweep(t *testing.T) ExportInput {
	dir := t.TempDir()
	s := ExportInput{Dir: dir, Sweep: results.Sweep{Name: "classes", Baseline: "base", Confidence: 0.95,
		Cells: []results.CellInfo{{ID: "base", Config: "base", Shape: "agentic", Rate: 1}, {ID: "fast", Config: "fast", Shape: "agentic", Rate: 1}}}}
	tokens := map[int]int{}
	for id := range 20 {
		tokens[id] = 1000
		if id >= 10 {
			tokens[id] = 30000
		}
	}
	for blk := 1; blk <= 3; blk++ {
		for _, cell := range []string{"base", "fast"} {
			var recs []results.Record
			var buf bytes.Buffer
			for id := range 20 {
				ttft := float64(10+id+blk) * 1e6 // ns
				if cell == "fast" && id >= 10 {
					ttft /= 2
				}
				r := results.Record{ID: id, Phase: openloop.PhaseMeasure, Status: openloop.StatusOK, InputTokens: tokens[id], OutputTokens: 2,
					SentNs: 1e9, FirstTokenNs: 1e9 + int64(ttft), LastTokenNs: 1e9 + int64(ttft) + 1e6}
				if cell == "fast" && id == 15 {
					r.Status, r.ErrorClass, r.FirstTokenNs, r.LastTokenNs = openloop.StatusError, openloop.ErrClassTimeout, 0, 0
				}
				recs = append(recs, r)
				b, _ := json.Marshal(r)
				buf.Write(append(b, '\n'))
			}
			rd := filepath.Join("runs", cell, "b"+itoa(blk))
			if err := os.MkdirAll(filepath.Join(dir, rd), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, rd, "requests.jsonl"), buf.Bytes())
			sum := &results.RunSummary{Cell: cell, Config: cell, Shape: "agentic", Rate: 1, Block: blk, Verdict: results.VerdictOK,
				Classes: results.SummarizeClasses(recs, results.ClassByIdealNewTokens, tokens, [3]int{})}
			if err := sweepdir.WriteRunSummary(filepath.Join(dir, rd, "summary_A.json"), sum); err != nil {
				t.Fatal(err)
			}
			s.Runs = append(s.Runs, results.RunRef{Cell: cell, Block: blk, Dir: rd, Status: results.VerdictOK})
		}
	}
	return s
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestClassComparisonsSameRequests: per-class comparisons pair the same
// requests: HEAVY under fast is exactly half the baseline's TTFT over the 9
// requests both completed (15 dropped), WARM unchanged; the report carries
// the rows and the failures by class name the failure's class and mode.
func TestClassComparisonsSameRequests(t *testing.T) {
	a := analyzeDir(t, classSweep(t))
	rows := a.Classes
	byClass := map[string]results.ClassComparison{}
	for _, r := range rows {
		byClass[r.Class] = r
	}
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want WARM and HEAVY", rows)
	}
	h, w := byClass["HEAVY"], byClass["WARM"]
	if h.Paired != 9 || h.Dropped != 1 || h.TTFTP50.N != 3 || math.Abs(h.TTFTP50.Effect+0.5) > 1e-9 || math.Abs(h.TTFTP90.Effect+0.5) > 1e-9 {
		t.Errorf("HEAVY: %+v, want 9 paired, 1 dropped, −50%% over 3 blocks", h)
	}
	if w.Paired != 10 || w.Dropped != 0 || math.Abs(w.TTFTP50.Effect) > 1e-9 {
		t.Errorf("WARM: %+v, want 10 paired, unchanged", w)
	}
	var b strings.Builder
	v := newReportView(a)
	renderClassComparisons(&b, v)
	renderClassFailures(&b, v)
	for _, want := range []string{"| fast | base | agentic | 1 | HEAVY | 9 | 1 |", "-50.0% [-50.0%, -50.0%]",
		"## Failures by request class", "| fast | agentic | 1 | HEAVY | 10 | 1 | 10.0% | 30000 | timeout ×3 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
