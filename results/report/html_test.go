package report

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mbench/mbench/results/sweepdir"

	"github.com/mbench/mbench/results"

	"github.com/mbench/mbench/internal/chromiumtest"
	"github.com/mbench/mbench/internal/longrun"
)

// urlRE finds anything in a page that names another resource.
var urlRE = regexp.MustCompile(`(?i)(https?:|ftp:|wss?:)//[^"' )<]*|\b(src|href|action|srcset|poster)\s*=`)

// timelineHrefRE matches, at its start, a link to a run's timeline: a
// file in plots/ beside the page.
var timelineHrefRE = regexp.MustCompile(`^href="plots/timeline_[A-Za-z0-9._-]+\.svg"`)

// textNumber is the first number of a table cell's text ("290 ±12 ms").
func textNumber(t *testing.T, s string) float64 {
	t.Helper()
	f := strings.Fields(strings.TrimSpace(s))
	if len(f) == 0 {
		t.Fatalf("empty table cell")
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
	if err != nil {
		t.Fatalf("table cell %q: %v", s, err)
	}
	return v
}

// shownAs reports whether a shown (rounded) number stands for v: within the
// rounding of fmtNum (3 significant digits' worth of decimals).
func shownAs(shown, v float64) bool {
	return math.Abs(shown-v) <= 0.006+0.006*math.Abs(v)
}

// checkHTMLReport loads dir/report.html in chromium and checks it against
// the files the export wrote: every cell table number is its cell
// summary's mean, every run table number its run summary's value, the plots
// were drawn by the script, and the page logged nothing and named no other
// resource. It returns the page.
func checkHTMLReport(t *testing.T, browser, dir string) *chromiumtest.Page {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `<meta http-equiv="Content-Security-Policy" content="`+strings.ReplaceAll(htmlCSP, "'", "&#39;")+`">`) {
		t.Errorf("report.html lacks its Content-Security-Policy")
	}
	for _, loc := range urlRE.FindAllStringIndex(string(src), -1) {
		u := string(src[loc[0]:loc[1]])
		inline := strings.HasPrefix(string(src[loc[0]:]), `src="data:image/png;base64,`) // the forest plot, in the page itself
		timeline := timelineHrefRE.MatchString(string(src[loc[0]:]))                     // a link (never fetched) to a file beside the page
		if u != "http://www.w3.org/2000/svg" && !inline && !timeline {                   // the SVG namespace: a name, never fetched
			t.Errorf("report.html names another resource: %q", u)
		}
	}
	p := chromiumtest.Load(context.Background(), t, browser, filepath.Join(dir, "report.html"))
	if len(p.Problems) > 0 {
		t.Errorf("the browser logged: %q", p.Problems)
	}
	if p.Count(`<body[^>]* data-rendered="ok"`) != 1 {
		t.Fatalf("the script did not finish: %s", regexp.MustCompile(`<body[^>]*>`).FindString(p.DOM))
	}
	cells, _ := filepath.Glob(filepath.Join(dir, "cells", "*", "summary_A.json"))
	if len(cells) == 0 {
		t.Fatal("no cell summaries")
	}
	shown := p.Values("cell")
	withTTFT, withSteps := 0, 0
	for _, f := range cells {
		var cs results.CellSummary
		readJSON(t, f, &cs)
		for _, hm := range htmlCellMetrics {
			m, ok := cs.Metrics[hm.Key]
			got, inPage := shown[cs.Cell][hm.Key]
			switch {
			case !ok || m.Mean == nil:
				if inPage && got.Value != "" {
					t.Errorf("cell %s %s: page shows %q, summary has none", cs.Cell, hm.Key, got.Value)
				}
				continue
			case !inPage:
				t.Errorf("cell %s: %s (%v) not in the page's table", cs.Cell, hm.Key, *m.Mean)
				continue
			}
			if v, err := strconv.ParseFloat(got.Value, 64); err != nil || v != *m.Mean {
				t.Errorf("cell %s %s: data-value %q, summary mean %v", cs.Cell, hm.Key, got.Value, *m.Mean)
			}
			if x := textNumber(t, got.Text); !shownAs(x, hm.Scale**m.Mean) {
				t.Errorf("cell %s %s: shows %q for %v", cs.Cell, hm.Key, got.Text, hm.Scale**m.Mean)
			}
		}
		if m, ok := cs.Metrics["p90_ttft_ms"]; ok && m.Mean != nil {
			withTTFT++
		} else if cs.NRuns == 0 && slices.ContainsFunc(cs.Runs, func(r results.CellRun) bool { return r.Status == results.VerdictSaturated }) {
			withTTFT++ // drawn apart: where the engine stopped keeping up
		}
		if _, ok := cs.Metrics["step_duration_us_p50"]; ok {
			withSteps++
		}
	}
	runs := p.Values("run")
	gpuRuns, bareRuns := 0, 0
	for _, c := range cells {
		var cs results.CellSummary
		readJSON(t, c, &cs)
		for _, r := range cs.Runs {
			rs, err := sweepdir.ReadRunSummary(filepath.Join(dir, r.Dir, "summary_A.json"))
			if err != nil {
				continue // a failed run: no summary, no numbers
			}
			if _, err := os.Stat(filepath.Join(dir, r.Dir, "gpu.jsonl")); err == nil {
				gpuRuns++
			} else {
				bareRuns++
			}
			for k, v := range results.RunMetrics(rs) {
				if got, ok := runs[r.Dir][k]; ok && got.Value != strconv.FormatFloat(v, 'g', -1, 64) {
					t.Errorf("run %s %s: page %q, summary %v", r.Dir, k, got.Value, v)
				}
			}
			if rs.P90TTFTMs != nil && runs[r.Dir]["p90_ttft_ms"].Value == "" {
				t.Errorf("run %s: its TTFT p90 is not in the run table", r.Dir)
			}
		}
	}
	// The plots are SVG the script drew: one point per cell with a TTFT,
	// one CDF line per cell with steps, one GPU plot per run with samples
	// and a "no GPU samples" line for every other run.
	for _, c := range []struct {
		re   string
		want int
	}{
		{`<(circle|rect|polygon) class="pt"[^>]*><title>[^<]*TTFT p90`, withTTFT},
		{`<path class="cdf"`, withSteps},
		{`<svg class="plot gpu"`, gpuRuns},
		{`<p class="nodata" id="gpu-note">No GPU samples in ` + strconv.Itoa(bareRuns) + ` runs: `, min(bareRuns, 1)},
	} {
		if got := p.Count(c.re); got != c.want {
			t.Errorf("%d elements %s in the rendered page, want %d", got, c.re, c.want)
		}
	}
	return p
}

// readJSON decodes the JSON file path into v.
func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestHTMLReportInBrowser(t *testing.T) {
	longrun.Parallel(t) // its own browser profile and copy of the sweep
	browser := chromiumtest.Find(t)
	dir := copyTree(t, fixtureDir)
	if _, err := Export(context.Background(), fixtureSweep(dir)); err != nil {
		t.Fatal(err)
	}
	p := checkHTMLReport(t, browser, dir)
	shots := chromiumtest.Screenshot(context.Background(), t, browser, filepath.Join(dir, "report.html"), t.ArtifactDir(), "report", 1280, 1400)
	t.Logf("screenshots of report.html (go test -artifacts keeps them): %s", strings.Join(shots, " "))
	if p.Count(`<svg class="plot gpu"`) == 0 || p.Count(`No GPU samples in`) == 0 {
		t.Errorf("the fixture has runs with and without gpu.jsonl; the page should show both")
	}
	if p.Count(`id="simulated"`) != 1 {
		t.Errorf("a simulated sweep's page must say so")
	}

	// A control: the same page with a fetch and an image from the network.
	// The policy must refuse both, and the browser's log must show it, or
	// the clean log above proves nothing.
	src, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	ctl := strings.Replace(string(src), `<div id="tip"`, `<img src="http://127.0.0.1:9/x.png"><script>fetch("http://127.0.0.1:9/y")</script><div id="tip"`, 1)
	ctlPath := filepath.Join(t.TempDir(), "control.html")
	if err := os.WriteFile(ctlPath, []byte(ctl), 0o644); err != nil {
		t.Fatal(err)
	}
	cp := chromiumtest.Load(context.Background(), t, browser, ctlPath)
	refused := strings.Join(cp.Problems, "\n")
	for _, want := range []string{"http://127.0.0.1:9/x.png", "http://127.0.0.1:9/y"} {
		if !strings.Contains(refused, want) || !strings.Contains(refused, "Content Security Policy") {
			t.Errorf("control page: the policy did not visibly refuse %s; browser log problems: %q", want, cp.Problems)
		}
	}
}

// TestHTMLEscapes: free text from runs (a reason from an engine's log) is
// text in the page, never markup or script.
func TestHTMLEscapes(t *testing.T) {
	dir := copyTree(t, fixtureDir)
	s := fixtureSweep(dir)
	const evil = `</script><script>alert(1)</script><img src=x onerror=alert(2)>`
	s.Runs[0].Status, s.Runs[0].Reason = results.VerdictErrors, evil
	if _, err := Export(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(page), evil) || strings.Contains(string(page), "<script>alert") {
		t.Fatalf("report.html carries the reason as markup")
	}
	if !strings.Contains(string(page), "&lt;/script&gt;&lt;script&gt;alert(1)") {
		t.Errorf("report.html lost the reason's text")
	}
	if n := strings.Count(string(page), "<script"); n != 2 {
		t.Errorf("%d script elements, want 2 (the data and the code)", n)
	}
}
