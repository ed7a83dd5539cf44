package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/chromiumtest"
	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/results"
)

// TestDemoReportInBrowser runs the demo — matrices/sim.yaml as the README
// runs it, its engine on a port of the test's own — and opens its
// report.html in chromium: the page renders without a logged problem, its
// inline plots (the forest plot, the per-request TTFT and TPOT CDFs) are
// decoded, the demo's one rate draws no plot against rate (plots/ has none
// either) and says why, and every run that is not a result, and no other,
// links its timeline from the run table and from the list of runs that are
// not results, each link opening, from the page's directory, as an image
// the browser decodes. Which runs are not results is the machine's: the
// test reads them from the cell summaries and logs how many there were
// (results/report's TestHTMLPlotsAndLinksInBrowser checks links that
// always exist).
func TestDemoReportInBrowser(t *testing.T) {
	longTest(t)
	browser := chromiumtest.Find(t)
	src, err := os.ReadFile(filepath.Join("..", "..", "matrices", "sim.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(string(src), "\nengine:\n", "\nengine:\n  port: "+freePortBase(t)+"\n", 1)
	if body == string(src) {
		t.Fatal("matrices/sim.yaml has no engine: section to give a port")
	}
	dir := t.TempDir()
	matrix, out := filepath.Join(dir, "sim.yaml"), filepath.Join(dir, "out")
	writeTestFile(t, matrix, []byte(body))
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	if _, stderr, err := runSweepCLI(t, ctx, "run", matrix, "--out", out, "--quiet"); err != nil {
		t.Fatalf("the demo: %v\n%s", err, stderr)
	}

	p := chromiumtest.Load(ctx, t, browser, filepath.Join(out, "report.html"))
	if len(p.Problems) > 0 || p.Count(`<body[^>]* data-rendered="ok"`) != 1 {
		t.Fatalf("report.html did not render cleanly: %v", p)
	}
	cells, _ := filepath.Glob(filepath.Join(out, "cells", "*", "summary_A.json"))
	if len(cells) != 5 {
		t.Fatalf("%d cell summaries, want the demo's 5", len(cells))
	}
	var want []string // the timelines of the runs that are not results
	used := 0
	for _, f := range cells {
		var cs results.CellSummary
		readJSONFile(t, f, &cs)
		for _, r := range cs.Runs {
			if !r.Used {
				want = append(want, "plots/timeline_"+cs.Cell+"_"+filepath.Base(r.Dir)+".svg")
			} else {
				used++
			}
		}
	}
	// The per-request CDFs are over the runs that are results: drawn
	// exactly where the cells have one (which runs are, the machine's
	// grading decides).
	for _, id := range []string{"forest", "request-ttft-cdf", "request-tpot-cdf"} {
		m := regexp.MustCompile(`<img id="` + id + `"[^>]*data-drawn="(\d+)"`).FindStringSubmatch(p.DOM)
		drawn := m != nil && m[1] != "0"
		if want := id == "forest" || used > 0; drawn != want {
			t.Errorf("the inline plot %s decoded in the page: %v (%v), want %v with %d runs that are results", id, drawn, m, want, used)
		}
	}
	if n := p.Count(`<svg class="plot (ttft|tpot)"`); n != 0 || p.Count(`<p class="nodata">Every shape was measured at one rate`) != 1 {
		t.Errorf("the demo has one rate: want no plot against rate (got %d) and the line that says why", n)
	}
	if vs, _ := filepath.Glob(filepath.Join(out, "plots", "*_vs_rate_*")); len(vs) != 0 {
		t.Errorf("plots against rate written for one rate: %v", vs)
	}

	slices.Sort(want)
	t.Logf("%d runs are not results: %q", len(want), want)
	runs := p.DOM[strings.Index(p.DOM, `<table id="runs"`):]
	problems := ""
	if i := strings.Index(p.DOM, `<ul id="problems">`); i >= 0 {
		problems = p.DOM[i : i+strings.Index(p.DOM[i:], "</ul>")]
	}
	for _, part := range []struct{ name, dom string }{{"run table", runs}, {"list of runs that are not results", problems}} {
		got := (&chromiumtest.Page{DOM: part.dom}).Links("timeline")
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("the %s links timelines %q, want those of the runs that are not results %q", part.name, got, want)
		}
	}
	links := p.Links("timeline")
	sizes := chromiumtest.ImageSizes(ctx, t, browser, out, links)
	for _, href := range links {
		if s := sizes[href]; s.W == 0 || s.H == 0 {
			t.Errorf("the link %s does not resolve to an image the browser decodes (natural size %v)", href, s)
		}
	}
}
