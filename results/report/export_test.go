package report

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/results/sweepdir"

	"github.com/mbench/mbench/results"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// copyTree copies the fixture sweep into a fresh directory.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// golden compares got with testdata/golden/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s differs from golden at line %d:\n got: %s\nwant: %s\n(run with -update if the change is intended)", name, i+1, g, w)
			}
		}
	}
}

func TestExportGolden(t *testing.T) {
	dir := copyTree(t, fixtureDir)
	rep, err := Export(context.Background(), fixtureSweep(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"report.md", "tables.csv"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		golden(t, name, b)
	}
	if out := os.Getenv("MBENCH_PLOTS_OUT"); out != "" { // for looking at the plots
		_ = os.MkdirAll(out, 0o755)
		ps, _ := filepath.Glob(filepath.Join(dir, "plots", "*"))
		for _, p := range ps {
			b, _ := os.ReadFile(p)
			_ = os.WriteFile(filepath.Join(out, filepath.Base(p)), b, 0o644)
		}
	}
	wantFiles := []string{"cells/plain-r0.5/summary_A.json", "cells/mc_prod-r2/summary_A.json", "report.md", "tables.csv",
		"plots/comparisons_forest.png", "plots/comparisons_forest.svg",
		"plots/ttft_p90_vs_rate_4096x256.png", "plots/ttft_p90_vs_rate_4096x256.svg",
		"plots/tpot_p90_vs_rate_4096x256.png", "plots/tpot_p90_vs_rate_4096x256.svg",
		"plots/step_duration_cdf.png", "plots/step_duration_cdf.svg",
		"plots/gpu_util_plain-r0.5_b1.png", "plots/gpu_util_mc_both-r2_b1.svg"}
	have := map[string]bool{}
	for _, f := range rep.Files {
		have[f] = true
	}
	for _, f := range wantFiles {
		if !have[f] {
			t.Errorf("Export did not write %s (wrote %v)", f, rep.Files)
		}
	}
	// The forest plot has a row per primary comparison, A/A controls
	// included, and names a row it cannot draw with why.
	forest, _ := os.ReadFile(filepath.Join(dir, "plots", "comparisons_forest.svg"))
	for _, want := range []string{"mooncake_both vs plain, rate=2 4096x256", "A/A plain_aa vs plain, rate=0.5 4096x256",
		"noop_connector vs plain, rate=2 4096x256: n/a (cell missing", "within noise", "A/A control"} {
		if !strings.Contains(string(forest), want) {
			t.Errorf("the forest plot lacks %q", want)
		}
	}
	if have["plots/gpu_util_plain-r2_b1.png"] {
		t.Error("GPU plot written for a run without gpu.jsonl")
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("warnings: %v", rep.Warnings)
	}
	// No temp files left behind by the atomic writes.
	tmps, _ := filepath.Glob(filepath.Join(dir, "*", ".*.tmp-*"))
	if len(tmps) > 0 {
		t.Errorf("temp files left: %v", tmps)
	}
}

func TestExportCellSummary(t *testing.T) {
	dir := copyTree(t, fixtureDir)
	if _, err := Export(context.Background(), fixtureSweep(dir)); err != nil {
		t.Fatal(err)
	}
	var cs results.CellSummary
	b, err := os.ReadFile(filepath.Join(dir, "cells", "noop-r0.5", "summary_A.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatal(err)
	}
	m := cs.Metrics["p90_ttft_ms"]
	if cs.NRuns != 2 || m.N != 2 || len(m.Values) != 2 || m.Blocks[1] != 2 || len(cs.MissingBlocks) != 1 || cs.MissingBlocks[0] != 3 {
		t.Errorf("noop-r0.5: n_runs=%d n=%d blocks=%v missing=%v", cs.NRuns, m.N, m.Blocks, cs.MissingBlocks)
	}
	// The values are the runs' own p90 TTFT, and the statistics are theirs,
	// recomputed by hand: with two values, s = |a − b|/√2 and the Student t
	// on 1 df is Cauchy, so t(0.975, 1) = tan(0.475π).
	var vals [2]float64
	for i := range vals {
		rs, err := sweepdir.ReadRunSummary(filepath.Join(dir, "runs", "noop-r0.5", fmt.Sprintf("b%d", i+1), "summary_A.json"))
		if err != nil || rs.P90TTFTMs == nil {
			t.Fatalf("run summary b%d: %v", i+1, err)
		}
		vals[i] = *rs.P90TTFTMs
	}
	if len(m.Values) != 2 || m.Values[0] != vals[0] || m.Values[1] != vals[1] {
		t.Errorf("p90_ttft_ms values = %v, want the runs' %v", m.Values, vals)
	}
	mean, sd := (vals[0]+vals[1])/2, math.Abs(vals[0]-vals[1])/math.Sqrt2
	half := math.Tan(0.475*math.Pi) * sd / math.Sqrt2
	if m.Mean == nil || m.HalfWidth == nil || !near(*m.Mean, mean, 1e-9) || !near(*m.HalfWidth, half, 1e-9) ||
		!near(*m.CILo, mean-half, 1e-9) || !near(*m.RelHalfWidth, half/mean, 1e-9) || !near(*m.CV, sd/mean, 1e-9) {
		t.Errorf("p90_ttft_ms stats = %+v, want mean %v ± %v", m, mean, half)
	}
	if len(cs.Runs) != 3 || cs.Runs[2].Used || cs.Runs[2].Status != "failed" {
		t.Errorf("runs = %+v", cs.Runs)
	}
	b, _ = os.ReadFile(filepath.Join(dir, "cells", "mc_prod-r2", "summary_A.json"))
	if err := json.Unmarshal(b, &cs); err != nil || cs.NRuns != 0 || len(cs.MissingBlocks) != 3 {
		t.Errorf("missing cell: %v %+v", err, cs)
	}
	// A cell whose every run was saturated: none is used, and all three are
	// counted as saturated (they were counted only among the used runs, so
	// saturated_runs was always 0).
	cs = results.CellSummary{}
	b, _ = os.ReadFile(filepath.Join(dir, "cells", "noop-r2", "summary_A.json"))
	if err := json.Unmarshal(b, &cs); err != nil || cs.NRuns != 0 || cs.SaturatedRuns != 3 || cs.Verdicts[results.VerdictSaturated] != 3 || cs.Verdicts.Total() != 3 {
		t.Errorf("saturated cell: %v n_runs %d saturated_runs %d verdicts %v", err, cs.NRuns, cs.SaturatedRuns, cs.Verdicts)
	}
	cs = results.CellSummary{}
	b, _ = os.ReadFile(filepath.Join(dir, "cells", "mc_both-r0.5", "summary_A.json"))
	if err := json.Unmarshal(b, &cs); err != nil || cs.ClientLimitedRuns != 1 || cs.Verdicts.Total() != len(cs.Runs) {
		t.Errorf("client-limited cell: %v client_limited_runs %d verdicts %v", err, cs.ClientLimitedRuns, cs.Verdicts)
	}
}

func TestExportPartialAndRedacted(t *testing.T) {
	dir := copyTree(t, fixtureDir)
	s := fixtureSweep(dir)
	s.Runs = append(s.Runs[:4:4], s.Runs[6]) // plain-r0.5 b1..3, plain-r2 b1, noop-r0.5 b1
	s.StopReason, s.Blocks, s.Simulated = "", 0, false
	s.Redact = func(x string) string { return strings.ReplaceAll(x, "dash0.internal", "<host>") }
	rep, err := Export(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"this export is partial", "cell noop-r2 (noop_connector, rate=2, 4096x256): **missing**",
		"cell plain-r2 (plain, rate=2, 4096x256): no usable run in block 2, 3", "| <host> |", "n/a (1 block)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("partial report lacks %q", want)
		}
	}
	if strings.Contains(string(md), "SIMULATED") {
		t.Error("a sweep of a real engine is labelled simulated")
	}
	for _, f := range rep.Files {
		if strings.HasSuffix(f, ".png") {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, f))
		if bytes.Contains(b, []byte("dash0.internal")) {
			t.Errorf("%s contains the unredacted host name", f)
		}
	}
}

func TestExportProblems(t *testing.T) {
	ctx := context.Background()
	if _, err := Export(ctx, ExportInput{}); err == nil {
		t.Error("no directory: want an error")
	}
	if _, err := Export(ctx, ExportInput{Dir: t.TempDir(), Sweep: results.Sweep{Confidence: 1.5}}); err == nil {
		t.Error("confidence 1.5: want an error")
	}
	if _, err := Export(ctx, ExportInput{Dir: t.TempDir(), Sweep: results.Sweep{Cells: []results.CellInfo{{ID: "../escape"}}}}); err == nil {
		t.Error("cell ID ../escape: want an error")
	}
	dir := copyTree(t, fixtureDir)
	s := fixtureSweep(dir)
	s.Runs = append(s.Runs, results.RunRef{Cell: "nope", Block: 1, Dir: "runs/nope/b1", Status: "ok"},
		results.RunRef{Cell: "plain-r2", Block: 1, Dir: "../../etc", Status: "ok"})
	if err := os.WriteFile(filepath.Join(dir, "runs/plain-r2/b2/summary_A.json"), []byte("{broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "runs/plain-r2/b3/summary_A.json")); err != nil {
		t.Fatal(err)
	}
	rep, err := Export(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(rep.Warnings, "\n")
	for _, want := range []string{"belongs to no cell", "outside the sweep", "parse run summary runs/plain-r2/b2/summary_A.json", "its summary_A.json is missing"} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, dir) {
		t.Errorf("warnings name the machine's path: %s", all)
	}
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Export(ctx2, fixtureSweep(copyTree(t, fixtureDir))); err == nil {
		t.Error("cancelled context: want an error")
	}
}

// TestExportSpreadFollowsTheStop: the fixture's three blocks (first stage
// 2) compared as the sweep stopped: to repeat.max or its budget, every
// comparison with a CI is an ordinary paired t; ended by the stopping rule,
// every one takes its spread from the second stage (block 3 alone gives no
// spread, so there it falls back to the paired t and says so).
func TestExportSpreadFollowsTheStop(t *testing.T) {
	for _, ruleStop := range []bool{false, true} {
		dir := copyTree(t, fixtureDir)
		in := fixtureSweep(dir)
		in.RuleStop = ruleStop
		rep, err := Export(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range append(rep.Comparisons, rep.NoiseFloor...) {
			if r.N < 2 {
				continue
			}
			n++
			if r.Method != results.MethodPairedT {
				t.Errorf("ruleStop %v, %s %s: method %q; one second-stage block cannot give a spread", ruleStop, r.Cell, r.Metric, r.Method)
			}
		}
		if n == 0 {
			t.Fatal("no comparison with a CI in the fixture")
		}
	}
	// With the stop by the rule and a first stage of one pair: the second
	// stage is the paired blocks after the first (blocks 2–3 where every
	// block has a usable run).
	dir := copyTree(t, fixtureDir)
	in := fixtureSweep(dir)
	in.RuleStop, in.Stage1 = true, 1
	rep, err := Export(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	three := 0
	for _, r := range append(rep.Comparisons, rep.NoiseFloor...) {
		if r.N != 3 {
			continue
		}
		three++
		if r.Method != results.MethodSecondStage || r.SpreadBlocks != 2 {
			t.Errorf("ruleStop, stage1 1, %s %s: method %q over %d blocks, want second-stage over blocks 2–3", r.Cell, r.Metric, r.Method, r.SpreadBlocks)
		}
	}
	if three == 0 {
		t.Fatal("no comparison over three blocks in the fixture")
	}
}

// near reports whether got is within tol of want (NaN equals NaN).
func near(got, want, tol float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(got)
	}
	return math.Abs(got-want) <= tol
}
