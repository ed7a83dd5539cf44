package report

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/results"
)

// TestReportOpensWithHeadline: report.md's first section is the result —
// every primary comparison with the text its comparison row has, the A/A
// verdict, the run counts and the stop reason — before any absolute table.
func TestReportOpensWithHeadline(t *testing.T) {
	dir := copyTree(t, fixtureDir)
	rep, err := Export(context.Background(), fixtureSweep(dir))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	first := strings.Index(md, "\n## ")
	if first < 0 || !strings.HasPrefix(md[first+1:], "## Result\n") {
		t.Fatalf("report.md does not open with the result:\n%.400s", md)
	}
	next := strings.Index(md[first+1:], "\n## ")
	head := md[first+1 : first+1+next]
	primary := 0
	for _, r := range rep.Comparisons {
		if !r.Primary {
			if r.Significant() && strings.Contains(head, r.Text()) {
				t.Errorf("a secondary comparison (%s %s %s) in the headline", r.Metric, r.Config, r.Text())
			}
			continue
		}
		primary++
		row := "| " + r.Config + " | " + r.Shape + " | " + fmtFloat(r.Rate) + " | " + r.Text() + " |"
		if !strings.Contains(head, row) {
			t.Errorf("the headline lacks the primary comparison %q", row)
		}
	}
	if primary == 0 {
		t.Fatal("the fixture has no primary comparisons")
	}
	for _, want := range []string{"**A/A controls**: the A/A control is too wide (±13.5%) to measure the noise floor: effects below ±13.5% cannot be told from noise (2 of 2 within noise on ttft_p90; the target, repeat.rel_ci, is ±5.0%)",
		"**Within noise, but too wide to tell**: noop_connector at rate=0.5 (4096x256): ±24.4% (it could detect ±39.4%)",
		"**What counts as a result**: only runs with verdict ok count", "23 of 27 runs are results; 4 are not (1 failed, 3 saturated)",
		"2 cells have no usable run: noop_connector at rate=2 (4096x256), mooncake_producer at rate=2 (4096x256)",
		"**Why the sweep stopped**: max blocks reached (3)"} {
		if !strings.Contains(head, want) {
			t.Errorf("the headline lacks %q:\n%s", want, head)
		}
	}
	for _, absolute := range []string{"## TTFT p90 Comparison", "## Environment", "## Per-Step Latency"} {
		if i := strings.Index(md, absolute); i >= 0 && i < first+1+next {
			t.Errorf("%s comes before the end of the headline", absolute)
		}
	}
}

// TestAAVerdict: the A/A line names a control that differs, says when none
// could be compared, and says the floor holds only when every compared
// control is within noise.
func TestAAVerdict(t *testing.T) {
	within := results.ComparisonRow{Config: "plain_aa", Baseline: "plain", Shape: "s", Rate: 1,
		Comparison: results.Comparison{N: 4, P: 0.6, PAdj: 0.6, Lo: -0.03, Hi: 0.04, Confidence: 0.95}}
	differs := within
	differs.Rate, differs.Comparison = 2, results.Comparison{N: 4, P: 0.001, PAdj: 0.002, Effect: 0.1, Lo: 0.05, Hi: 0.15, Confidence: 0.95}
	wide := within // two wild blocks: a CI that measures nothing
	wide.Comparison = results.Comparison{N: 2, P: 0.5, PAdj: 0.5, Lo: -0.9, Hi: 6.624, Confidence: 0.95}
	oneBlock := within // one usable block on a side: no CI at all
	oneBlock.Comparison = results.Comparison{N: 1, P: 1, PAdj: 1, Confidence: 0.95}
	missing := within
	missing.Rate, missing.Note, missing.Comparison = 3, "cell missing: no run with verdict ok", results.Comparison{}
	for _, c := range []struct {
		name string
		rows []results.ComparisonRow
		bad  bool
		want string
	}{
		{"none", nil, false, "no A/A control in this sweep"},
		{"within", []results.ComparisonRow{within}, false, "no A/A control differs from its original on m (1 of 1 within noise, CI half-widths up to ±3.5%, within the ±5.0% target): the noise floor holds"},
		{"too wide", []results.ComparisonRow{wide}, false, "the A/A control is too wide (±376.2%) to measure the noise floor: effects below ±376.2% cannot be told from noise (1 of 1 within noise on m; the target, repeat.rel_ci, is ±5.0%)"},
		{"one block", []results.ComparisonRow{oneBlock}, false, "the A/A controls could not be compared (plain_aa vs plain at rate=1 (s): n/a (1 block)): the noise floor is not measured"},
		{"differs", []results.ComparisonRow{within, differs}, true, "**an A/A control differs from its original on m** (plain_aa vs plain at rate=2 (s): +10.0% [+5.0, +15.0])"},
		{"untested", []results.ComparisonRow{missing}, false, "could not be compared"},
		{"partly", []results.ComparisonRow{within, missing}, false, "the noise floor holds; not compared: plain_aa vs plain at rate=3 (s): n/a"},
	} {
		got, bad := aaVerdict(c.rows, "m", 0.05)
		if bad != c.bad || !strings.Contains(got, c.want) || strings.Contains(got, "holds") != strings.Contains(c.want, "holds") {
			t.Errorf("%s: %q (differs %v), want %q (differs %v)", c.name, got, bad, c.want, c.bad)
		}
	}
	// With no target the floor is what the controls measured, never "holds".
	if got, _ := aaVerdict([]results.ComparisonRow{within}, "m", 0); strings.Contains(got, "holds") || !strings.Contains(got, "effects below ±3.5% cannot be told from noise") {
		t.Errorf("no target: %q", got)
	}
}

// TestTooWide: a within-noise comparison wider than the target says what
// it could have detected; one within the target, a significant one and one
// without a CI say nothing.
func TestTooWide(t *testing.T) {
	row := func(cfg string, c results.Comparison) results.ComparisonRow {
		return results.ComparisonRow{Config: cfg, Baseline: "plain", Shape: "s", Rate: 2, Comparison: c}
	}
	rows := []results.ComparisonRow{
		row("narrow", results.Comparison{N: 4, PAdj: 0.5, Lo: -0.03, Hi: 0.04, HalfLog: 0.035, Confidence: 0.95}),
		row("wide", results.Comparison{N: 4, PAdj: 0.5, Lo: -0.1, Hi: 0.14, HalfLog: 0.118, Confidence: 0.95}),
		row("found", results.Comparison{N: 4, PAdj: 0.001, Effect: 0.3, Lo: 0.1, Hi: 0.5, HalfLog: 0.15, Confidence: 0.95}),
		row("one", results.Comparison{N: 1, PAdj: 1}),
	}
	want := "wide at rate=2 (s): ±12.0% (it could detect ±18.4%) wider than the ±5.0% target: effects below the half-width cannot be told from noise there"
	if got := tooWide(rows, 0.05); got != want {
		t.Errorf("tooWide: %q\nwant %q", got, want)
	}
	if got := tooWide(rows[:1], 0.05); got != "" {
		t.Errorf("within the target: %q", got)
	}
}

// TestSectionsCollapse: a section with nothing to show for this sweep is
// one line; with something to show it is a table.
func TestSectionsCollapse(t *testing.T) {
	cell := func(metrics map[string][]float64) *results.Cell {
		c := &results.Cell{Info: results.CellInfo{ID: "c", Config: "plain", Shape: "s", Rate: 1}}
		c.Sum.Metrics, c.Sum.NRuns = map[string]results.MetricStats{}, 1
		for k, xs := range metrics {
			m := xs[0]
			c.Sum.Metrics[k] = results.MetricStats{Mean: &m, Values: xs, N: len(xs)}
		}
		return c
	}
	render := func(sec mdSection, cells ...*results.Cell) string {
		var b strings.Builder
		sec(&b, &reportView{a: &results.Analysis{}, s: &results.Sweep{}, ordered: cells})
		return b.String()
	}
	oneLine := func(name, got string) {
		t.Helper()
		if strings.Count(strings.TrimSpace(got), "\n") != 0 || strings.Contains(got, "|") {
			t.Errorf("%s: want one line, got:\n%s", name, got)
		}
	}
	warm := map[string][]float64{"class_warm_share": {1, 1}, "class_medium_share": {0, 0}}
	oneLine("all WARM", render(renderClasses, cell(warm), cell(warm)))
	if got := render(renderClasses, cell(warm)); !strings.Contains(got, "every measured request of every cell is WARM") {
		t.Errorf("all WARM: %q", got)
	}
	mixed := map[string][]float64{"class_warm_share": {0.7, 0.8}, "class_medium_share": {0.3, 0.2}}
	if got := render(renderClasses, cell(warm), cell(mixed)); !strings.Contains(got, "## Request classes") || !strings.Contains(got, "| MEDIUM |") {
		t.Errorf("two classes: want the table, got:\n%s", got)
	}
	medium := map[string][]float64{"class_medium_share": {1}}
	if got := render(renderClasses, cell(warm), cell(medium)); !strings.Contains(got, "## Request classes") {
		t.Errorf("one cell WARM, another MEDIUM: want the table, got:\n%s", got)
	}
	oneLine("no classes", render(renderClasses, cell(map[string][]float64{})))

	zero := map[string][]float64{"prefix_cache_hit_rate": {0, 0}, "prefix_cache_hit_rate_max_inst": {0, 0}}
	oneLine("zero cache", render(renderPrefixCache, cell(zero)))
	hits := map[string][]float64{"prefix_cache_hit_rate": {0, 0.2}, "prefix_cache_hit_rate_max_inst": {0, 0.4}}
	if got := render(renderPrefixCache, cell(zero), cell(hits)); !strings.Contains(got, "## Prefix cache by instance") {
		t.Errorf("a cache hit: want the table, got:\n%s", got)
	}
	ext := map[string][]float64{"prefix_cache_hit_rate": {0}, "external_hit_rate_mean_inst": {0.5}}
	if got := render(renderPrefixCache, cell(ext)); !strings.Contains(got, "## Prefix cache by instance") {
		t.Errorf("an external hit: want the table, got:\n%s", got)
	}
	oneLine("no steps", render(renderSteps, cell(map[string][]float64{})))
	oneLine("no SLO", render(renderSLO, cell(map[string][]float64{})))
	oneLine("no client limit", render(renderClientLimited, cell(map[string][]float64{})))
	oneLine("no problems", render(renderProblems, cell(map[string][]float64{})))
}
