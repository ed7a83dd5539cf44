package report

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/chromiumtest"
	"github.com/mbench/mbench/internal/longrun"
	"github.com/mbench/mbench/results"
)

// TestHTMLPlotsAndLinksInBrowser: in a two-rate sweep's report.html, as
// chromium makes it, every inline plot is decoded (natural size > 0),
// TTFT p90 and TPOT p90 are drawn against rate with CI bars, and every
// run that is not a result — and no other — links its timeline from its
// row of the run table and its line under "Runs that are not results";
// each link resolves, from the page's directory, to an image the browser
// decodes; report.md links the same files.
func TestHTMLPlotsAndLinksInBrowser(t *testing.T) {
	longrun.Parallel(t) // its own browser profile and copy of the sweep
	browser := chromiumtest.Find(t)
	dir := copyTree(t, fixtureDir)
	writeRequests(t, filepath.Join(dir, "runs", "plain-r0.5", "b1")) // the per-request CDFs' data
	writeRequests(t, filepath.Join(dir, "runs", "noop-r2", "b1"))    // a timeline with requests
	rep, err := Export(context.Background(), fixtureSweep(dir))
	if err != nil {
		t.Fatal(err)
	}
	p := checkHTMLReport(t, browser, dir)

	for _, id := range []string{"forest", "request-ttft-cdf", "request-tpot-cdf"} {
		if m := regexp.MustCompile(`<img id="` + id + `"[^>]*data-drawn="(\d+)"`).FindStringSubmatch(p.DOM); m == nil || m[1] == "0" {
			t.Errorf("the inline plot %s is not decoded in the page: %v", id, m)
		}
	}

	// Against rate: one plot per metric for the fixture's one shape, a
	// point per cell that has the metric, each with its CI bar where the
	// cell has a CI.
	withTPOT, withCI := 0, 0
	for _, c := range rep.Cells {
		if m, ok := c.Metrics["p90_tpot_ms"]; ok && m.Mean != nil {
			withTPOT++
			if m.CILo != nil {
				withCI++
			}
		} else if c.NRuns == 0 && slices.ContainsFunc(c.Runs, func(r results.CellRun) bool { return r.Status == results.VerdictSaturated }) {
			withTPOT++ // drawn apart: where the engine stopped keeping up
		}
	}
	for _, cls := range []string{"ttft", "tpot"} {
		if n := p.Count(`<svg class="plot ` + cls + `"`); n != 1 {
			t.Errorf("%d %s-against-rate plots, want 1 (one shape, two rates)", n, cls)
		}
	}
	tpot := svgOf(t, p.DOM, "tpot")
	if n := len(regexp.MustCompile(`class="pt"[^>]*><title>[^<]*TPOT p90`).FindAllString(tpot, -1)); n != withTPOT || withTPOT == 0 {
		t.Errorf("%d points on the TPOT p90 plot, want one per cell with a TPOT p90 (%d)", n, withTPOT)
	}
	if n := strings.Count(tpot, `<path class="ci"`); n != withCI || withCI == 0 {
		t.Errorf("%d CI bars on the TPOT p90 plot, want one per cell with a CI (%d)", n, withCI)
	}

	// Timelines: the runs that are not results, from the cell summaries.
	var want []string
	for _, c := range rep.Cells {
		for _, r := range c.Runs {
			if !r.Used {
				want = append(want, "plots/timeline_"+c.Cell+"_"+filepath.Base(r.Dir)+".svg")
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("the fixture has no run that is not a result: nothing to link")
	}
	runs := p.DOM[strings.Index(p.DOM, `<table id="runs"`):]
	problems := p.DOM[strings.Index(p.DOM, `<ul id="problems">`):]
	problems = problems[:strings.Index(problems, "</ul>")]
	slices.Sort(want)
	for _, part := range []struct{ name, dom string }{{"run table", runs}, {"list of runs that are not results", problems}} {
		got := (&chromiumtest.Page{DOM: part.dom}).Links("timeline")
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("the %s links timelines %q, want those of the runs that are not results %q", part.name, got, want)
		}
	}
	// report.md links the same timelines, each to a file there.
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	var mdLinks []string
	for _, m := range regexp.MustCompile(`\[timeline\]\(([^)]*)\)`).FindAllStringSubmatch(string(md), -1) {
		mdLinks = append(mdLinks, m[1])
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(m[1]))); err != nil {
			t.Errorf("report.md links %s: %v", m[1], err)
		}
	}
	if slices.Sort(mdLinks); !slices.Equal(mdLinks, want) {
		t.Errorf("report.md links timelines %q, want %q", mdLinks, want)
	}
	links := p.Links("timeline") // as the page has them
	sizes := chromiumtest.ImageSizes(context.Background(), t, browser, dir, links)
	for _, href := range links {
		if s := sizes[href]; s.W == 0 || s.H == 0 {
			t.Errorf("the link %s does not resolve to an image the browser decodes (natural size %v)", href, s)
		}
	}
	// The probe can fail: a link to no file is seen, and decodes to nothing.
	if s, ok := chromiumtest.ImageSizes(context.Background(), t, browser, dir, []string{"plots/timeline_none_b9.svg"})["plots/timeline_none_b9.svg"]; !ok || s != (chromiumtest.Size{}) {
		t.Errorf("a link to a missing file reads as %v (seen: %v), want 0×0", s, ok)
	}
}
