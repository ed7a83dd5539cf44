package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/hangguard"
)

// instrumentMatrix is a vllm-kind matrix with instrument: true whose
// "vllm" is the simulated engine behind a shell line that reports the
// environment the plugin needs, so the installation path is exercised
// without a GPU.
const instrumentMatrix = `name: instr
seed: 1
hosts:
  local: {address: local, gpus: [0]}
engine:
  kind: vllm
  model: m
  port: %PORT%
  instrument: true
  ready_timeout: 20s
  grace: 2s
  command: >-
    echo "PYTHONPATH=$PYTHONPATH MBENCH_STEP_LOG=$MBENCH_STEP_LOG" >&2;
    exec {{.Self}} sim --addr {{.Bind}}:{{.Port}} --step-log {{.StepLog}} --model {{.Model}} --step-base-us 1000
configs:
  plain: {}
rates: [20]
shapes: [{name: 16x4, input: 16, output: 4}]
measure: {warmup_requests: 2, min_completed: 10, timeout: 30s, drain_timeout: 5s}
repeat: {min: 1, max: 1}
gate: {enabled: false}
`

// TestInstrumentInstallsPlugin: with engine.instrument the mbench_vllm
// package is installed under the sweep's state directory and the engine
// starts with it on PYTHONPATH and MBENCH_STEP_LOG set to its step log.
func TestInstrumentInstallsPlugin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := writeMatrix(t, dir, instrumentMatrix)
	out := filepath.Join(dir, "out")
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	if stdout, stderr, err := runSweepCLI(t, ctx, "run", m, "--out", out, "--quiet"); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, stdout, stderr)
	}
	pkg := filepath.Join(out, ".state", "mbench_vllm")
	for _, f := range []string{"mbench_vllm/plugin.py", "mbench_vllm/noop.py", "mbench_vllm/_fastwrap.c", "mbench_vllm/_fastwrap_state.h", "mbench_vllm-0.1.0.dist-info/entry_points.txt"} {
		if _, err := os.Stat(filepath.Join(pkg, f)); err != nil {
			t.Errorf("plugin not installed: %v", err)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(out, ".state", "logs", "engine-*.log"))
	if len(logs) == 0 {
		t.Fatal("no engine log")
	}
	data, _ := os.ReadFile(logs[0])
	want := "PYTHONPATH=" + pkg
	if !strings.Contains(string(data), want) || !strings.Contains(string(data), "MBENCH_STEP_LOG="+filepath.Join(out, ".state", "steps")) {
		t.Errorf("engine environment lacks %q and MBENCH_STEP_LOG under .state/steps; its log:\n%s", want, data)
	}
	for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
		if st, _ := l["status"].(string); !slices.Contains(measuredStatuses, st) {
			t.Errorf("run %v: %v %v", l["cell"], l["status"], l["reason"])
		}
	}
}
