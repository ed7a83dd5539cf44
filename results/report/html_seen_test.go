package report

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mbench/mbench/results/sweepdir"

	"github.com/mbench/mbench/results"

	"github.com/mbench/mbench/internal/chromiumtest"
	"github.com/mbench/mbench/internal/longrun"
)

// The plot geometry of report.js (W, H, M there): the plotting area is
// x in [M.l, W−M.r], y in [M.t, H−M.b]; the legend starts right of W.
const (
	seenW, seenH           = 560, 340
	seenLeft, seenRight    = 64, 560 - 16
	seenTop, seenBottom    = 28, 340 - 44
	seenLegendX            = 560 + 8
	seenPointTolerancePx   = 6.0 // a marker's half-size: its centre may sit this far inside the frame
	seenMinDodgePx         = 4.0 // the A/A control's point beside its original's at the same rate
	seenAttainmentDecimals = 1
)

// editSummary rewrites one run summary of a copied fixture with edit.
func editSummary(t *testing.T, dir, run string, edit func(map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, run, "summary_A.json")
	var m map[string]any
	readJSON(t, path, &m)
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// svgOf returns the markup of the first <svg class="plot CLS"…>…</svg>.
func svgOf(t *testing.T, dom, cls string) string {
	t.Helper()
	i := strings.Index(dom, `<svg class="plot `+cls+`"`)
	if i < 0 {
		t.Fatalf("no %s plot in the page", cls)
	}
	j := strings.Index(dom[i:], "</svg>")
	return dom[i : i+j]
}

// floats parses the numbers of every match's first group.
func floats(t *testing.T, re, s string) []float64 {
	t.Helper()
	var out []float64
	for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(s, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("%q: %v", m[0], err)
		}
		out = append(out, v)
	}
	return out
}

// TestHTMLReportAsSeen renders a sweep with what breaks plots — a CI wider
// than its mean (n=2), an SLO, an A/A control equal to its original, a
// saturated cell, failed requests of two classes, SLO attainment whose
// t-interval leaves [0, 1] — and checks the page as a person would see it:
// every CI bar inside the plot (a latency never below 0), no negative or
// inconsistently rounded tick, the SLO drawn, every legend entry right of
// the data, one colour per (config, rate) in the step CDF, the A/A control
// hollow and beside its original, the saturated cell drawn apart, each
// failure's reason and class listed, attainment within [0, 100%].
// Screenshots go to the test's artifact directory (go test -artifacts).
func TestHTMLReportAsSeen(t *testing.T) {
	longrun.Parallel(t) // its own browser profile and copy of the sweep
	browser := chromiumtest.Find(t)
	dir := copyTree(t, fixtureDir)
	editSummary(t, dir, "runs/noop-r0.5/b1", func(m map[string]any) { m["p90_ttft_ms"] = 5.0 })
	editSummary(t, dir, "runs/noop-r0.5/b2", func(m map[string]any) { m["p90_ttft_ms"] = 900.0 })
	for b, att := range map[string]float64{"b1": 0.1, "b2": 0.95, "b3": 0.5} {
		editSummary(t, dir, "runs/plain-r0.5/"+b, func(m map[string]any) {
			m["slo"] = map[string]any{"ttft_ms": 600}
			m["slo_attainment"], m["request_goodput"] = att, att*0.5
		})
	}
	editSummary(t, dir, "runs/mc_both-r2/b1", func(m map[string]any) {
		m["errors"], m["failed"] = map[string]any{"http_5xx": 4, "timeout": 1}, 5
	})
	writeRequests(t, filepath.Join(dir, "runs", "plain-r0.5", "b1")) // the per-request CDFs' data
	writeRequests(t, filepath.Join(dir, "runs", "mc_both-r2", "b2"))
	if _, err := Export(context.Background(), fixtureSweep(dir)); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "report.html")
	shots := chromiumtest.Screenshot(context.Background(), t, browser, page, t.ArtifactDir(), "as-seen", 1280, 1400)
	t.Logf("screenshots: %s", strings.Join(shots, " "))
	p := checkHTMLReport(t, browser, dir)

	// The forest plot (every comparison's change and CI) is decoded and
	// drawn by the browser: its onload records its width.
	for _, id := range []string{"forest", "request-ttft-cdf", "request-tpot-cdf"} {
		if m := regexp.MustCompile(`<img id="` + id + `"[^>]*data-drawn="(\d+)"`).FindStringSubmatch(p.DOM); m == nil || m[1] == "0" {
			t.Errorf("the plot %s is not drawn in the page: %v", id, m)
		}
	}

	ttft := svgOf(t, p.DOM, "ttft")
	// CI bars: "M x,lo V hi …" with lo and hi inside the plotting area.
	bars := regexp.MustCompile(`<path class="ci" d="M([\d.]+),([\d.-]+)V([\d.-]+)`).FindAllStringSubmatch(ttft, -1)
	if len(bars) == 0 {
		t.Fatal("no CI bars on the TTFT plot")
	}
	for _, b := range bars {
		lo, _ := strconv.ParseFloat(b[2], 64)
		hi, _ := strconv.ParseFloat(b[3], 64)
		if lo > seenBottom+0.5 || hi < seenTop-0.5 || lo < hi {
			t.Errorf("CI bar %s runs outside the plot (y in [%d, %d])", b[0], seenTop, seenBottom)
		}
	}
	if !strings.Contains(p.DOM, "(low end clipped at 0)") {
		t.Error("the CI that reached below 0 is not marked as clipped")
	}
	for _, axis := range regexp.MustCompile(`<g class="axis">(.*?)</g>`).FindAllStringSubmatch(p.DOM, -1) {
		labels := regexp.MustCompile(`<text x="[\d.]+" y="[\d.]+" text-anchor="(?:middle|end)">([^<]*)</text>`).FindAllStringSubmatch(axis[1], -1)
		decimals := map[string]map[int]bool{"middle": {}, "end": {}}
		for _, l := range regexp.MustCompile(`text-anchor="(middle|end)">(-?[\d.]+)</text>`).FindAllStringSubmatch(axis[1], -1) {
			if strings.HasPrefix(l[2], "-") {
				t.Errorf("negative tick label %q", l[2])
			}
			d := 0
			if i := strings.Index(l[2], "."); i >= 0 {
				d = len(l[2]) - i - 1
			}
			decimals[l[1]][d] = true
		}
		if len(labels) > 0 && (len(decimals["middle"]) > 1 || len(decimals["end"]) > 1) {
			t.Errorf("an axis labels its ticks with different decimals: %v", decimals)
		}
	}
	if ys := floats(t, `<line class="limit" x1="[\d.]+" x2="[\d.]+" y1="([\d.]+)"`, ttft); len(ys) != 1 || ys[0] < seenTop || ys[0] > seenBottom {
		t.Errorf("SLO lines on the TTFT plot at y %v, want one inside the plot", ys)
	}
	if !strings.Contains(ttft, "SLO: TTFT ≤ 600 ms") {
		t.Error("the SLO line is not labelled")
	}
	for _, plotCls := range []string{"ttft", "cdf", "gpu"} {
		svg := svgOf(t, p.DOM, plotCls)
		for _, x := range floats(t, `<g class="entry"[^>]*>.*?<text x="([\d.]+)"`, svg) {
			if x < seenLegendX {
				t.Errorf("%s plot: a legend entry at x=%v, over the data (which ends at %d)", plotCls, x, seenRight)
			}
		}
		for _, x := range floats(t, `class="pt"[^>]* data-cx="([\d.]+)"`, svg) {
			if x > seenRight+seenPointTolerancePx || x < seenLeft-seenPointTolerancePx {
				t.Errorf("%s plot: a point at x=%v outside the plotting area", plotCls, x)
			}
		}
	}
	strokes := map[string]bool{}
	cdfs := regexp.MustCompile(`<path class="cdf" d="[^"]*" fill="none" stroke="([^"]+)"`).FindAllStringSubmatch(svgOf(t, p.DOM, "cdf"), -1)
	for _, m := range cdfs {
		strokes[m[1]] = true
	}
	if len(cdfs) < 2 || len(strokes) != len(cdfs) {
		t.Errorf("%d step CDF lines in %d colours: want one colour per (config, rate)", len(cdfs), len(strokes))
	}
	// The A/A control: hollow points, each beside its original's.
	series := func(name string) []float64 {
		i := strings.Index(ttft, `<g class="series" data-name="`+name+`">`)
		if i < 0 {
			t.Fatalf("no series %q on the TTFT plot", name)
		}
		g := ttft[i : i+strings.Index(ttft[i:], "</g>")]
		if name != "plain" && !strings.Contains(g, `fill="#fff"`) {
			t.Errorf("the A/A control's points are not hollow")
		}
		return floats(t, `class="pt"[^>]* data-cx="([\d.]+)"`, g)
	}
	orig, aa := series("plain"), series("plain_aa (A/A of plain)")
	if len(orig) != len(aa) || len(orig) == 0 {
		t.Fatalf("plain has %d points, its A/A control %d", len(orig), len(aa))
	}
	for i := range orig {
		if d := aa[i] - orig[i]; d < seenMinDodgePx && -d < seenMinDodgePx {
			t.Errorf("at rate %d the A/A point is %.1f px from its original's: one hides the other", i, d)
		}
	}
	if !strings.Contains(ttft, "no usable run: the mean of its saturated runs, not a result") {
		t.Error("the saturated cell (noop_connector at rate 2) is not drawn")
	}
	for _, want := range []string{"run noop-r0.5 b3: failed — engine exited with status 1 during warmup", "run noop-r2 b1: saturated — TTFT rising"} {
		if !strings.Contains(p.DOM, want) {
			t.Errorf("the page does not list %q", want)
		}
	}
	if !regexp.MustCompile(`<table id="errors"[\s\S]*<th>http_5xx</th><th>timeout</th>[\s\S]*<td>mc_both-r2</td><td>mooncake_both</td><td class="num">2</td><td class="num">1</td><td class="verdict-ok">ok</td><td class="num">4</td><td class="num">1</td>`).MatchString(p.DOM) {
		t.Error("the failed requests by class are not in the page")
	}
	att := p.Values("cell")["plain-r0.5"][results.MetricSLOAttainment].Text
	m := regexp.MustCompile(`^([\d.]+)% \[([\d.]+), ([\d.]+)\]$`).FindStringSubmatch(att)
	if m == nil {
		t.Fatalf("SLO attainment shown as %q, want mean [lo, hi] in percent", att)
	}
	for _, x := range m[1:] {
		if v, _ := strconv.ParseFloat(x, 64); v < 0 || v > 100 {
			t.Errorf("SLO attainment %q leaves [0, 100%%]", att)
		}
	}
}

// TestHTMLCapacityAsSeen: a capacity search's page opens with its
// intervals and paired result, and draws its probes against the limit with
// each config's interval as a bar inside the plot.
func TestHTMLCapacityAsSeen(t *testing.T) {
	longrun.Parallel(t) // its own browser profile and copy of the sweep
	browser := chromiumtest.Find(t)
	dir := copyTree(t, fixtureDir)
	const shape, limit = "4096x256", 600.0
	sp := results.CapacitySpec{Metric: "ttft_p90", MaxMs: limit, Lo: 0.5, Hi: 2, Tolerance: 0.1, Blocks: 3, Confidence: 0.95,
		Baseline: "plain", Configs: []string{"plain", "mooncake_both"}, Shapes: []string{shape}}
	var runs []results.CapacityRun
	for _, c := range []struct {
		cfg   string
		knee  float64
		rates []float64
	}{{"plain", 2.4, []float64{0.5, 1, 2, 2.8, 4}}, {"mooncake_both", 1.8, []float64{0.5, 1, 1.5, 2, 4}}} {
		for _, r := range c.rates {
			for b := 1; b <= 3; b++ {
				v := 300 * math.Exp(2*(r-c.knee)) * (1 + 0.03*float64(b-2)) // 300 ms at the knee, 600 ms about 0.35 req/s above it
				run := results.CapacityRun{CellInfo: results.CellInfo{Config: c.cfg, Shape: shape, ID: c.cfg + "@" + fmtNum(r), Rate: r}, Block: b, Status: results.VerdictOK, Value: v}
				if v > 5000 {
					run.Status, run.Value = results.VerdictSaturated, math.NaN()
				}
				runs = append(runs, run)
			}
		}
	}
	rep := results.AnalyzeCapacity(sp, runs)
	if err := sweepdir.WriteCapacity(filepath.Join(dir, results.CapacityFile), &rep); err != nil {
		t.Fatal(err)
	}
	if _, err := Export(context.Background(), fixtureSweep(dir)); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "report.html")
	shots := chromiumtest.Screenshot(context.Background(), t, browser, page, t.ArtifactDir(), "capacity", 1280, 1400)
	t.Logf("screenshots: %s", strings.Join(shots, " "))
	p := chromiumtest.Load(context.Background(), t, browser, page)
	if len(p.Problems) > 0 || p.Count(`<body[^>]* data-rendered="ok"`) != 1 {
		t.Fatalf("report.html did not render cleanly: %v", p)
	}
	result := p.DOM[strings.Index(p.DOM, `<section id="result">`):strings.Index(p.DOM, `</section>`)]
	if !strings.Contains(result, "Capacity at the SLO (ttft_p90 ≤ 600 ms)") {
		t.Error("the page does not open with the capacity search")
	}
	for _, s := range capacitySearchRows(&rep) {
		if !strings.Contains(result, "<td>"+s.Config+"</td><td>"+shape+"</td><td class=\"num\">"+s.Interval+"</td>") {
			t.Errorf("the headline lacks %s's interval %s", s.Config, s.Interval)
		}
	}
	if len(rep.Comparisons) != 1 || !strings.Contains(result, rep.Comparisons[0].Words()) {
		t.Errorf("the headline lacks the paired capacity comparison %v", rep.Comparisons)
	}
	svg := svgOf(t, p.DOM, "capacity")
	if ys := floats(t, `<line class="limit" x1="[\d.]+" x2="[\d.]+" y1="([\d.]+)"`, svg); len(ys) != 1 || ys[0] < seenTop || ys[0] > seenBottom {
		t.Errorf("limit lines at %v, want one inside the plot", ys)
	}
	for _, s := range rep.Searches {
		i := strings.Index(svg, `<g class="interval" data-name="`+s.Config+`">`)
		if i < 0 {
			t.Errorf("no interval bar for %s", s.Config)
			continue
		}
		xs := floats(t, `<line x1="([\d.]+)"`, svg[i:i+strings.Index(svg[i:], "</g>")])
		for _, x := range xs {
			if x < seenLeft || x > seenRight {
				t.Errorf("%s's interval bar reaches x=%v, outside the plot", s.Config, x)
			}
		}
	}
	if n := p.Count(`<g class="series" data-name="[^"]*">`); n < 2 {
		t.Errorf("%d series drawn, want the probes of both configs", n)
	}
}
