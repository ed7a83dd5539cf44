package report

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mbench/mbench/results/sweepdir"

	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/results"
)

// The fixed fake sweep under testdata/sweep is generated once by
// `go test ./results -run TestGenerateFixture -fixture` and then read, never
// regenerated, by the golden tests. The generator goes through SummarizeRun
// and probes.SummarizeSteps, so the fixture is what a real sweep writes.
var regenFixture = flag.Bool("fixture", false, "regenerate testdata/sweep (the fake sweep of the golden tests)")

const fixtureDir = "testdata/sweep"

// fixtureCell is one cell of the fake sweep and how its runs behave.
type fixtureCell struct {
	results.CellInfo
	ttftMs   float64 // p90-ish TTFT level
	stepUs   float64 // step duration level
	timers   []string
	rising   bool // TTFT climbs through the window: saturated
	lagBlock int  // block whose load generator falls behind
}

// fixtureCells: plain is the baseline; mooncake_both carries a +15-30% tax;
// noop_connector saturates at rate 2; plain_aa is an A/A control of plain;
// mooncake_producer never ran at rate 2 (missing cell).
var fixtureCells = []fixtureCell{
	{results.CellInfo{ID: "plain-r0.5", Config: "plain", Shape: "4096x256", Rate: 0.5}, 290, 53, nil, false, 0},
	{results.CellInfo{ID: "plain-r2", Config: "plain", Shape: "4096x256", Rate: 2}, 561, 91, nil, false, 0},
	{results.CellInfo{ID: "noop-r0.5", Config: "noop_connector", Shape: "4096x256", Rate: 0.5}, 296, 69, []string{"build_meta_us", "get_finished_us", "unaccounted_us"}, false, 0},
	{results.CellInfo{ID: "noop-r2", Config: "noop_connector", Shape: "4096x256", Rate: 2}, 900, 175, []string{"build_meta_us", "get_finished_us", "unaccounted_us"}, true, 0},
	{results.CellInfo{ID: "mc_both-r0.5", Config: "mooncake_both", Shape: "4096x256", Rate: 0.5}, 335, 1452, []string{"build_meta_us"}, false, 2},
	{results.CellInfo{ID: "mc_both-r2", Config: "mooncake_both", Shape: "4096x256", Rate: 2}, 726, 1460, []string{"build_meta_us"}, false, 0},
	{results.CellInfo{ID: "mc_prod-r0.5", Config: "mooncake_producer", Shape: "4096x256", Rate: 0.5}, 453, 1461, []string{"build_meta_us"}, false, 0},
	{results.CellInfo{ID: "mc_prod-r2", Config: "mooncake_producer", Shape: "4096x256", Rate: 2}, 0, 0, nil, false, 0},
	{results.CellInfo{ID: "plain_aa-r0.5", Config: "plain_aa", Shape: "4096x256", Rate: 0.5, SameAs: "plain"}, 290, 53, nil, false, 0},
	{results.CellInfo{ID: "plain_aa-r2", Config: "plain_aa", Shape: "4096x256", Rate: 2, SameAs: "plain"}, 561, 91, nil, false, 0},
}

// fixtureBlockEffect is the workload effect shared by every run of a block.
var fixtureBlockEffect = map[int]float64{1: 1.00, 2: 1.06, 3: 0.96}

// fixtureSweep describes the fake sweep rooted at dir.
func fixtureSweep(dir string) ExportInput {
	s := ExportInput{Dir: dir, Sweep: results.Sweep{Name: "microbench3 (fixture)", Baseline: "plain", Confidence: 0.95, RelCI: 0.05, Blocks: 3,
		StopReason: "max blocks reached (3): 4 of 10 cells are still above the 5% target",
		Env:        map[string]string{"mbench": "v0.0.0-fixture", "engine_version": "sim 0.1", "gpu": "simulated H20", "host": "dash0.internal"},
		Simulated:  true, Stage1: 2,
		Design: "williams-reversed-pairs, not balanced after 3 blocks (fixture)"}}
	for i, c := range fixtureCells {
		s.Cells = append(s.Cells, c.CellInfo)
		if c.ttftMs == 0 {
			continue // never ran
		}
		for b := 1; b <= 3; b++ {
			ref := results.RunRef{Cell: c.ID, Block: b, Dir: fmt.Sprintf("runs/%s/b%d", c.ID, b), Status: "ok",
				Position: (i+b)%len(fixtureCells) + 1}
			if c.rising {
				ref.Status, ref.Reason = "saturated", "TTFT rising"
			}
			if c.ID == "noop-r0.5" && b == 3 {
				ref.Status, ref.Reason = "failed", "engine exited with status 1 during warmup"
			}
			s.Runs = append(s.Runs, ref)
		}
	}
	return s
}

func TestGenerateFixture(t *testing.T) {
	if !*regenFixture {
		t.Skip("run with -fixture to regenerate testdata/sweep")
	}
	if err := os.RemoveAll(fixtureDir); err != nil {
		t.Fatal(err)
	}
	s := fixtureSweep(fixtureDir)
	for i, c := range fixtureCells {
		for _, ref := range s.Runs {
			if ref.Cell != c.ID {
				continue
			}
			dir := filepath.Join(fixtureDir, ref.Dir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if ref.Status == "failed" {
				writeFile(t, filepath.Join(dir, "engine.log"), []byte("RuntimeError: CUDA out of memory\nexit status 1\n"))
				continue
			}
			rng := rand.New(rand.NewPCG(uint64(i*10+ref.Block), 42))
			writeFixtureRun(t, rng, c, ref, dir)
		}
	}
}

// writeFixtureRun writes one run's engine_step.jsonl, gpu.jsonl (two runs
// only) and summary_A.json.
func writeFixtureRun(t *testing.T, rng *rand.Rand, c fixtureCell, ref results.RunRef, dir string) {
	be := fixtureBlockEffect[ref.Block]
	const n = 120
	start := t0.Add(time.Duration(ref.Block) * time.Hour)
	var recs []results.Record
	sent := int64(2 * time.Second)
	for i := 0; i < n; i++ {
		sent += int64(rng.ExpFloat64() / c.Rate * 1e9)
		ttft := c.ttftMs * 0.8 * be * math.Exp(0.12*rng.NormFloat64())
		if c.rising {
			ttft += 40 * float64(sent) / 1e9
		}
		r := okRecord(i, sent, ttft, 256, 10*be*math.Exp(0.02*rng.NormFloat64()))
		r.InputTokens = 4096
		if ref.Block == c.lagBlock && i%12 == 0 {
			r.ScheduledNs -= 8 * ms
		}
		recs = append(recs, r)
	}
	var steps bytes.Buffer
	stepStart := start.Add(2 * time.Second).UnixMicro()
	for i := 0; i < 120; i++ {
		d := c.stepUs * be * math.Exp(0.3*rng.NormFloat64())
		line := map[string]any{"ts_us": stepStart + int64(i)*20000, "step_duration_us": math.Round(d)}
		for _, tm := range c.timers {
			switch tm {
			case "build_meta_us":
				line[tm] = math.Round(0.95 * d)
			case "get_finished_us":
				line[tm] = math.Round(0.05 * d)
			case "unaccounted_us":
				line[tm] = math.Round(0.30 * d)
			}
		}
		b, _ := json.Marshal(line)
		steps.Write(append(b, '\n'))
	}
	steps.WriteString("{not json\n") // the reader counts and skips it
	writeFile(t, filepath.Join(dir, "engine_step.jsonl"), steps.Bytes())
	st, err := probes.SummarizeSteps(context.Background(), bytes.NewReader(steps.Bytes()), 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var gpu *probes.GPUSummary
	if ref.Block == 1 && (c.ID == "plain-r0.5" || c.ID == "mc_both-r2") {
		var samples []probes.GPUSample
		var buf bytes.Buffer
		for k := 0; k < 60; k++ {
			for g := 0; g < 2; g++ {
				u := math.Max(0, math.Min(100, 40+30*math.Sin(float64(k)/9+float64(g))+10*rng.NormFloat64()))
				s := probes.GPUSample{TsUs: stepStart + int64(k)*1000000, Host: "dash0", GPU: g, Name: "NVIDIA H20",
					UtilGPU: math.Round(u), MemUsedMiB: 80000, MemTotalMiB: 97871, PowerW: 200 + u, TempC: 50}
				samples = append(samples, s)
				b, _ := json.Marshal(s)
				buf.Write(append(b, '\n'))
			}
		}
		writeFile(t, filepath.Join(dir, "gpu.jsonl"), buf.Bytes())
		g := probes.SummarizeGPU(samples)
		gpu = &g
	}
	last := recs[len(recs)-1].DoneNs
	for _, r := range recs {
		last = max(last, r.DoneNs)
	}
	sum, err := results.SummarizeRun(results.RunInput{Cell: c.ID, Config: c.Config, Shape: c.Shape, Rate: c.Rate, Block: ref.Block,
		Engine: "sim 0.1", Simulated: true, Arrival: "poisson", Records: recs, Start: start,
		WindowStart: start.Add(time.Duration(recs[0].SentNs)), WindowEnd: start.Add(time.Duration(last)),
		Offered: c.Rate, ClientCPUPct: 3.5, Steps: &st, GPU: gpu})
	if err != nil {
		t.Fatal(err)
	}
	if err := sweepdir.WriteRunSummary(filepath.Join(dir, "summary_A.json"), sum); err != nil {
		t.Fatal(err)
	}
}

// writeFile writes a test file or fails the test.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// analyzeDir analyses the sweep of in as Export does, reading its runs
// under in.Dir.
func analyzeDir(t *testing.T, in ExportInput) *results.Analysis {
	t.Helper()
	a, err := sweepdir.Analyze(context.Background(), in.Dir, in.Sweep)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// t0 is t=0 of the fixture's request records.
var t0 = time.Date(2026, 5, 26, 17, 28, 0, 0, time.UTC)

const ms = int64(time.Millisecond)

// okRecord is a successful measured request: sent at sentNs, first token
// after ttftMs, then `out` tokens spaced itlMs apart.
func okRecord(id int, sentNs int64, ttftMs float64, out int, itlMs float64) results.Record {
	first := sentNs + int64(ttftMs*float64(ms))
	itl := make([]float64, out-1)
	for i := range itl {
		itl[i] = itlMs
	}
	last := first + int64(float64(out-1)*itlMs*float64(ms))
	return results.Record{ID: id, Phase: "measure", ScheduledNs: sentNs, SentNs: sentNs, FirstTokenNs: first,
		LastTokenNs: last, DoneNs: last + ms, InputTokens: 100, OutputTokens: out, ITLMs: itl, Status: "ok"}
}
