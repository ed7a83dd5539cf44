package main

// Issue 22 on the simulated engine: goodput under a matrix's slo, counted
// again here from requests.jsonl, and report.html loaded in a real browser.

import (
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/chromiumtest"
	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/results"
)

// sloSweep spreads E2EL with output lengths from 1 to 60 tokens (1.5 ms a
// step), so that the E2EL bound splits every run's requests.
const sloSweep = `name: slo-test
seed: 22
engine:
  kind: sim
  port: %PORT%
  ready_timeout: 20s
  grace: 2s
  sim: {step_base_us: 1500, decode_seq_us: 20, prefill_token_us: 0.5}
configs:
  plain: {}
  walk:
    sim: {connector: walk, walk_ns_per_block: 2000}
rates: [10, 20]
shapes:
  - name: spread
    input: 64
    output_dist: {kind: uniform, min: 1, max: 60}
measure: {warmup_requests: 3, min_completed: 40, timeout: 30s, drain_timeout: 5s}
repeat: {min: 2, max: 2}
gate: {enabled: false}
baseline: plain
slo: {ttft_ms: 250, tpot_ms: 20, e2el_ms: 45}
`

// sloRecord is the part of a requests.jsonl line goodput needs, decoded here
// rather than through openloop, so the count is independent of mbench's.
type sloRecord struct {
	Phase        string `json:"phase"`
	Status       string `json:"status"`
	ErrorClass   string `json:"error_class"`
	SentNs       int64  `json:"sent_ns"`
	FirstTokenNs int64  `json:"first_token_ns"`
	LastTokenNs  int64  `json:"last_token_ns"`
	OutputTokens int    `json:"output_tokens"`
}

// countGood counts, by vLLM's definition (vllm/benchmarks/serve.py,
// calculate_metrics), the measured requests of a run that completed and
// meet every bound of slo (tpot 0 for one token; a zero bound is absent),
// and the requests an attainment counts (completed or failed by the engine).
func countGood(t *testing.T, path string, slo results.SLO) (good, answered int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r sloRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if r.Phase != "measure" || r.ErrorClass == "drained" || r.ErrorClass == "canceled" {
			continue
		}
		answered++
		if r.Status != "ok" {
			continue
		}
		ttft, e2el := float64(r.FirstTokenNs-r.SentNs)/1e6, float64(r.LastTokenNs-r.SentNs)/1e6
		tpot := 0.0
		if r.OutputTokens > 1 {
			tpot = (e2el - ttft) / float64(r.OutputTokens-1)
		}
		within := func(v, bound float64) bool { return bound <= 0 || v <= bound }
		if within(ttft, slo.TTFTMs) && within(tpot, slo.TPOTMs) && within(e2el, slo.E2ELMs) {
			good++
		}
	}
	return good, answered
}

// sloRunSummary is the part of a run's summary_A.json goodput needs.
type sloRunSummary struct {
	Cell          string       `json:"cell"`
	Block         int          `json:"block"`
	Completed     int          `json:"completed"`
	WindowStart   string       `json:"window_start"`
	WindowEnd     string       `json:"window_end"`
	SLOMet        *int         `json:"slo_met"`
	Goodput       *float64     `json:"request_goodput"`
	SLOAttainment *float64     `json:"slo_attainment"`
	SLO           *results.SLO `json:"slo"`
}

// checkRunGoodput counts the good and answered requests of the run in dir
// (countGood) and reports where s, its summary, disagrees: slo_met, goodput
// over the measured window, attainment, the echoed SLO. ok is false when s
// lacks the SLO fields.
func checkRunGoodput(t *testing.T, dir string, s sloRunSummary, slo results.SLO) (good, answered int, ok bool) {
	t.Helper()
	good, answered = countGood(t, filepath.Join(dir, "requests.jsonl"), slo)
	ws, err1 := time.Parse(time.RFC3339Nano, s.WindowStart)
	we, err2 := time.Parse(time.RFC3339Nano, s.WindowEnd)
	if err1 != nil || err2 != nil || !we.After(ws) {
		t.Fatalf("%s: window %q–%q", dir, s.WindowStart, s.WindowEnd)
	}
	want := float64(good) / we.Sub(ws).Seconds()
	switch {
	case s.SLOMet == nil || s.Goodput == nil || s.SLOAttainment == nil || s.SLO == nil:
		t.Errorf("%s: summary lacks slo/slo_met/request_goodput/slo_attainment", dir)
		return good, answered, false
	case *s.SLOMet != good:
		t.Errorf("%s: slo_met %d, counted %d", dir, *s.SLOMet, good)
	case math.Abs(*s.Goodput-want) > 1e-9*want:
		t.Errorf("%s: request_goodput %v, counted %d in %v = %v", dir, *s.Goodput, good, we.Sub(ws), want)
	case math.Abs(*s.SLOAttainment-float64(good)/float64(answered)) > 1e-12:
		t.Errorf("%s: slo_attainment %v, counted %d of %d", dir, *s.SLOAttainment, good, answered)
	}
	if *s.SLO != slo {
		t.Errorf("%s: summary's slo %+v, want %+v", dir, *s.SLO, slo)
	}
	return good, answered, true
}

func TestSLOGoodputAndHTMLReportOnSim(t *testing.T) {
	t.Parallel()
	longTest(t)
	if testing.Short() {
		t.Skip("end-to-end sweep")
	}
	dir := t.TempDir()
	m := writeMatrix(t, dir, sloSweep)
	out := filepath.Join(dir, "out")
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	if stdout, stderr, err := runSweepCLI(t, ctx, "run", m, "--out", out, "--quiet"); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}

	// Per run: what mbench wrote equals the count made here.
	split := 0
	runGoodput := map[string]map[int]float64{} // cell → block → goodput
	for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
		rd := filepath.Join(out, l["dir"].(string))
		var s sloRunSummary
		b, err := os.ReadFile(filepath.Join(rd, "summary_A.json"))
		if err == nil {
			err = json.Unmarshal(b, &s)
		}
		if err != nil {
			t.Fatalf("%s: %v", rd, err)
		}
		good, answered, ok := checkRunGoodput(t, rd, s, results.SLO{TTFTMs: 250, TPOTMs: 20, E2ELMs: 45})
		t.Logf("%s b%d: %d of %d requests met the SLO", s.Cell, s.Block, good, answered)
		if !ok {
			continue
		}
		if good > 0 && good < s.Completed {
			split++
		}
		if l["status"] == "ok" {
			if runGoodput[s.Cell] == nil {
				runGoodput[s.Cell] = map[int]float64{}
			}
			runGoodput[s.Cell][s.Block] = *s.Goodput
		}
	}
	if split == 0 {
		t.Errorf("no run had both good and bad requests: the sweep does not exercise the SLO")
	}

	// Per cell: the mean over the usable runs, with a CI, in the cell
	// summary, tables.csv, report.md and report.html.
	cellMean := map[string]float64{}
	for cell, byBlock := range runGoodput {
		var cs struct {
			Metrics map[string]struct {
				Mean      *float64 `json:"mean"`
				HalfWidth *float64 `json:"half_width"`
			} `json:"metrics"`
		}
		b, err := os.ReadFile(filepath.Join(out, "cells", cell, "summary_A.json"))
		if err == nil {
			err = json.Unmarshal(b, &cs)
		}
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, g := range byBlock {
			sum += g
		}
		g := cs.Metrics["request_goodput"]
		if g.Mean == nil || math.Abs(*g.Mean-sum/float64(len(byBlock))) > 1e-9 {
			t.Errorf("cell %s: request_goodput mean %v, runs %v", cell, g.Mean, byBlock)
			continue
		}
		if len(byBlock) > 1 && g.HalfWidth == nil {
			t.Errorf("cell %s: no CI on request_goodput over %d runs", cell, len(byBlock))
		}
		cellMean[cell] = *g.Mean
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The goodput sections and the plots are over the runs that are
	// results: present exactly where a cell has one (which runs are, the
	// machine's grading decides).
	anyResult := len(cellMean) > 0
	for _, want := range []string{"## Goodput under the SLO", "TTFT ≤ 250 ms, TPOT ≤ 20 ms, E2EL ≤ 45 ms", "### request_goodput (request_goodput) — secondary", "### slo_attainment (slo_attainment) — secondary"} {
		if strings.Contains(string(report), want) != anyResult {
			t.Errorf("report.md has %q: %v, with %d cells that have a result", want, !anyResult, len(cellMean))
		}
	}
	f, err := os.Open(filepath.Join(out, "tables.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(rows) < 2 {
		t.Fatalf("tables.csv: %v", err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, r := range rows[1:] {
		if want, ok := cellMean[r[col["cell"]]]; ok && r[col["level"]] == "cell" {
			if v, err := strconv.ParseFloat(r[col["request_goodput"]], 64); err != nil || math.Abs(v-want) > 1e-9*want {
				t.Errorf("tables.csv cell %s: request_goodput %q, want %v", r[col["cell"]], r[col["request_goodput"]], want)
			}
		}
	}

	// report.html in a real browser: the goodput column holds the cells'
	// numbers, the plots were drawn, nothing was logged, and the sim's runs
	// say they have no GPU samples.
	browser := chromiumtest.Find(t)
	p := chromiumtest.Load(ctx, t, browser, filepath.Join(out, "report.html"))
	if len(p.Problems) > 0 || p.Count(`<body[^>]* data-rendered="ok"`) != 1 {
		t.Fatalf("report.html did not render cleanly: %v", p)
	}
	shown := p.Values("cell")
	for cell, want := range cellMean {
		if got := shown[cell]["request_goodput"].Value; got != strconv.FormatFloat(want, 'g', -1, 64) {
			t.Errorf("report.html cell %s: request_goodput %q, want %v", cell, got, want)
		}
	}
	if n := p.Count(`<svg class="plot ttft"`); (n == 1) != anyResult || n > 1 {
		t.Errorf("%d TTFT plots, want 1 (one shape) where a cell has a result (%d do)", n, len(cellMean))
	}
	if n := p.Count(`<path class="cdf"`); n != len(cellMean) {
		t.Errorf("%d step CDF lines, want one per cell (%d)", n, len(cellMean))
	}
	if p.Count(`<svg class="plot gpu"`) != 0 || p.Count(`<p class="nodata" id="gpu-note">No run has GPU samples \(gpu.jsonl missing or empty in all \d+ runs\): no GPU plots.</p>`) != 1 {
		t.Error("the sim's runs have no GPU samples: want one line that says so and no GPU plot")
	}
}
