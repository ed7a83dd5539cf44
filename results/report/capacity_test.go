package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/results/sweepdir"

	"github.com/mbench/mbench/results"
)

func TestCapacityReportSection(t *testing.T) {
	dir := t.TempDir()
	rep := results.AnalyzeCapacity(testSpec(), capRuns("plain", []float64{10, 80}, 4, func(r float64, b int) float64 { return 2 * r }))
	if err := sweepdir.WriteCapacity(filepath.Join(dir, results.CapacityFile), &rep); err != nil {
		t.Fatal(err)
	}
	section := func(dir string) (string, bool) {
		sw := results.Sweep{Confidence: 0.95}
		sw.Capacity, sw.CapacityErr = sweepdir.Capacity(dir)
		v := newReportView(&results.Analysis{Sweep: sw})
		var b strings.Builder
		renderHeadline(&b, v)
		renderCapacityDetails(&b, v)
		return b.String(), v.searched()
	}
	got, searched := section(dir)
	for _, want := range []string{"## Capacity at the SLO (ttft_p90 ≤ 100 ms)", "| plain | s | [10.0, 80.0] |", "| taxed | s | none probed |", "| plain | s | 80 | fails |"} {
		if !strings.Contains(got, want) {
			t.Errorf("section lacks %q:\n%s", want, got)
		}
	}
	if !searched {
		t.Errorf("a sweep with %s is not read as a capacity search", results.CapacityFile)
	}
	if none, searched := section(t.TempDir()); searched || strings.Contains(none, "Capacity") {
		t.Errorf("a fixed-rate sweep got a capacity section: %q", none)
	}
	if err := os.WriteFile(filepath.Join(dir, results.CapacityFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if bad, _ := section(dir); !strings.Contains(bad, "could not be read") {
		t.Errorf("a corrupt capacity.json is not reported: %q", bad)
	}
}

// testSpec is the capacity search of the section test: one bound, two
// configs, four blocks.
func testSpec() results.CapacitySpec {
	return results.CapacitySpec{Metric: "ttft_p90", MaxMs: 100, Lo: 10, Hi: 80, Tolerance: 0.05, Blocks: 4,
		Confidence: 0.95, Baseline: "plain", Configs: []string{"plain", "taxed"}, Shapes: []string{"s"}}
}

// capRuns makes the ok runs of one config: metric(rate, block) for every
// rate and block.
func capRuns(cfg string, rates []float64, blocks int, metric func(rate float64, block int) float64) []results.CapacityRun {
	var out []results.CapacityRun
	for _, r := range rates {
		for b := 1; b <= blocks; b++ {
			out = append(out, results.CapacityRun{CellInfo: results.CellInfo{Config: cfg, Shape: "s", ID: cfg + "-" + fmtNum(r), Rate: r}, Block: b, Status: results.VerdictOK, Value: metric(r, b)})
		}
	}
	return out
}
