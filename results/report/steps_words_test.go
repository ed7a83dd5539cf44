package report

import (
	"strings"
	"testing"

	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/results"
)

func metricsOf(kv map[string]float64) map[string]results.MetricStats {
	m := map[string]results.MetricStats{}
	for k, v := range kv {
		m[k] = results.MetricStats{Mean: &v}
	}
	return m
}

// The path words of the per-step table.
func TestStepPath(t *testing.T) {
	for _, tc := range []struct {
		m    map[string]float64
		want string
	}{
		{map[string]float64{"n_steps": 100, "batch_queue_steps": 0}, "step()"},
		{map[string]float64{"n_steps": 100}, "step()"},
		{map[string]float64{"n_steps": 100, "batch_queue_steps": 100}, "batch queue"},
		{map[string]float64{"n_steps": 100, "batch_queue_steps": 40}, "mixed"},
	} {
		if got := stepPath(metricsOf(tc.m)); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.m, got, tc.want)
		}
	}
}

func stepCell(config string, m map[string]float64, st *probes.StepStats) *results.Cell {
	return &results.Cell{
		Info: results.CellInfo{ID: config, Config: config, Shape: "s", Rate: 1},
		Used: map[int]*results.Run{0: {Sum: &results.RunSummary{EngineStep: st}}},
		Sum:  results.CellSummary{Metrics: metricsOf(m)},
	}
}

// A CPU-bound batch-queue cell (wait > 0 on some steps, the GPU mostly
// idle) without gpu_us says "not measured" with the plugin's reason, never
// a GPU time taken from wait or the step duration; a cell that measured
// gpu_us shows it; a missing hook reaches the report with its reason.
func TestRenderStepsGPUWords(t *testing.T) {
	cpuBound := stepCell("cpubound", map[string]float64{
		"n_steps": 500, "batch_queue_steps": 500, "step_duration_us_p50": 1077, "step_duration_us_p90": 1200,
		"step_duration_us_mean": 1080, "unaccounted_us_mean": 20, "schedule_us_p50": 400, "launch_us_p50": 300,
		"wait_us_p50": 34, "update_us_p50": 300,
	}, &probes.StepStats{NSteps: 500, BatchQueueSteps: 500,
		GPU:        probes.GPUTiming{Reason: "torch is not importable in the engine process"},
		Incomplete: []string{"executor.execute_model: UniProcExecutor has no execute_model"}})
	measured := stepCell("measured", map[string]float64{
		"n_steps": 500, "batch_queue_steps": 500, "step_duration_us_p50": 1077, "step_duration_us_p90": 1200,
		"step_duration_us_mean": 1080, "unaccounted_us_mean": 20, "wait_us_p50": 34, "gpu_us_p50": 100.5,
	}, &probes.StepStats{NSteps: 500, BatchQueueSteps: 500,
		GPU: probes.GPUTiming{Measured: true, Steps: 500, Source: "CUDA events around GPUModelRunner._model_forward"}})
	var b strings.Builder
	renderSteps(&b, &reportView{ordered: []*results.Cell{cpuBound, measured}})
	out := b.String()
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Split(l, " | "); len(f) > 1 {
			rows[strings.TrimPrefix(f[0], "| ")] = l
		}
	}
	if r := rows["cpubound"]; !strings.Contains(r, "| batch queue |") || !strings.Contains(r, "| not measured |") || strings.Contains(r, "1077 | 1200 | 400 | not timed | 300 | not timed | 34 | 300 | not timed | 1077") {
		t.Errorf("cpu-bound row: %s", r)
	}
	if r := rows["measured"]; !strings.Contains(r, "| 100 | 1.9% |") {
		t.Errorf("measured row: %s", r)
	}
	for _, want := range []string{
		"**GPU time not measured** for cpubound: torch is not importable in the engine process",
		"GPU time measured for measured (CUDA events around GPUModelRunner._model_forward)",
		"**cpubound: decomposition incomplete: executor.execute_model: UniProcExecutor has no execute_model**",
		"wait is the engine thread blocked on that batch's result — not its GPU time",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for _, bad := range []string{"duration is the GPU time", "GPU-bound and its"} {
		if strings.Contains(out, bad) {
			t.Errorf("report infers GPU time (%q):\n%s", bad, out)
		}
	}
}

// Host-bound GPU spans (the GPU reached the forward's start event before
// the host had launched it) never show as GPU time: a cell whose every
// span was host-bound says "not measured" with the reason the step log's
// summary gives, and a cell with some says how many were left out beside
// the others. GPU time.
func TestRenderStepsHostBoundWords(t *testing.T) {
	allHost := probes.StepStats{NSteps: 200, BatchQueueSteps: 200}
	allHost.GPU = probes.GPUTiming{HostBound: 200, HostBoundSpanP50: 1123.5, Source: "CUDA events"}
	allHost.GPU.Reason = "every GPU-timed batch (200) was host-bound: the GPU reached the forward's start event before the host had launched the forward, so the span of the CUDA events (p50 1124 µs) holds host time — an upper bound, not the GPU time"
	hostCell := stepCell("eager", map[string]float64{"n_steps": 200, "batch_queue_steps": 200, "step_duration_us_p50": 6766,
		"step_duration_us_p90": 7000, "wait_us_p50": 27}, &allHost)
	mixed := stepCell("mixed", map[string]float64{"n_steps": 200, "batch_queue_steps": 200, "step_duration_us_p50": 5497,
		"step_duration_us_p90": 5600, "wait_us_p50": 3757, "gpu_us_p50": 5494.4}, &probes.StepStats{NSteps: 200, BatchQueueSteps: 200,
		GPU: probes.GPUTiming{Measured: true, Steps: 190, HostBound: 10, HostBoundSpanP50: 5600, Source: "CUDA events"}})
	var b strings.Builder
	renderSteps(&b, &reportView{ordered: []*results.Cell{hostCell, mixed}})
	out := b.String()
	for _, want := range []string{
		"**GPU time not measured** for eager: every GPU-timed batch (200) was host-bound",
		"an upper bound, not the GPU time. It is not inferred from wait or the step duration.",
		"**GPU time partly measured** — host-bound batches left out (mixed at rate=1 (s): 10 of 200 GPU-timed batches)",
		"| 5494 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "1124 |") || strings.Contains(out, "1123") && strings.Contains(out, "| 1123") {
		t.Errorf("a host-bound span shown as GPU time:\n%s", out)
	}
}
