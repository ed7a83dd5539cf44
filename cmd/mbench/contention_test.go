package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/cpupin"
	"github.com/mbench/mbench/internal/hangguard"
)

// TestSweepRecordsContention: a sim sweep run with --client-cpus records,
// in each run's summary_A.json, what shared its CPUs — mbench's scheduling
// delay, the load generator's cores (the one it was pinned to), the local
// engine's process tree with mbench's own CPU beside it — and report.md
// shows them; a --client-cpus that is not a CPU list is a usage error.
// Not parallel: pinning moves this whole test process during each load.
func TestSweepRecordsContention(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end sweep")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc and pins CPUs")
	}
	all, err := cpupin.Allowed(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 {
		t.Skip("needs two CPUs to split")
	}
	dir := t.TempDir()
	matrix, out := filepath.Join(dir, "m.yaml"), filepath.Join(dir, "out")
	writeSimMatrix(t, matrix, map[string]string{"%NAME%": "contention", "%CONFIGS%": "  plain: {}", "%RATES%": "20", "%BLOCKS%": "2"})
	ctx, cancel := hangguard.Context(t)
	defer cancel()

	_, _, err = runCLI(t, ctx, "run", matrix, "--out", out, "--client-cpus", "x")
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--client-cpus") {
		t.Errorf("--client-cpus x: %v, want a usage error naming the flag", err)
	}

	client := cpupin.Format(all[:1])
	if _, stderr, err := runSweepCLI(t, ctx, "run", matrix, "--out", out, "--quiet", "--client-cpus", client); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr)
	}
	if got, _ := cpupin.Allowed(0); !slices.Equal(got, all) {
		t.Errorf("after the sweep the test process runs on %v, want its CPUs %v back", got, all)
	}
	runs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "b*", "summary_A.json"))
	if len(runs) < 2 { // a client-limited attempt is run again beside it (b1-try2)
		t.Fatalf("%d run summaries, want one per block at least", len(runs))
	}
	for _, p := range runs {
		var s struct {
			Contention *struct {
				SchedDelay *struct {
					Samples int     `json:"samples"`
					P99Ms   float64 `json:"p99_ms"`
				} `json:"sched_delay"`
				LoadGenCores *struct {
					CPUs string `json:"cpus"`
				} `json:"load_generator_cores"`
				EngineHosts []struct {
					Host       string `json:"host"`
					Procs      int    `json:"procs"`
					Cores      int    `json:"cores"`
					WithMbench bool   `json:"with_mbench"`
				} `json:"engine_hosts"`
			} `json:"contention"`
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		c := s.Contention
		switch {
		case c == nil:
			t.Errorf("%s: no contention", p)
		case c.SchedDelay == nil || c.SchedDelay.Samples < 1 || c.SchedDelay.P99Ms < 0:
			t.Errorf("%s: sched_delay %+v", p, c.SchedDelay)
		case c.LoadGenCores == nil || c.LoadGenCores.CPUs != client:
			t.Errorf("%s: load_generator_cores %+v, want CPUs %s", p, c.LoadGenCores, client)
		case len(c.EngineHosts) != 1 || c.EngineHosts[0].Host == "" || c.EngineHosts[0].Procs < 1 ||
			c.EngineHosts[0].Cores < len(all) || !c.EngineHosts[0].WithMbench:
			t.Errorf("%s: engine_hosts %+v, want the local engine's tree with mbench's own CPU", p, c.EngineHosts)
		}
	}
	rep, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(rep), "## CPU contention\n")
	sec, _, _ = strings.Cut(sec, "\n## ")
	if rows := regexp.MustCompile(`(?m)^\| plain \| 64x8 \| 20 \| [12] \| .* \| `+client+` \| .*mbench [\d.]+%`).FindAllString(sec, -1); !ok || len(rows) < 2 {
		t.Errorf("report.md has no CPU contention row per run:\n%s", rep)
	}
}
