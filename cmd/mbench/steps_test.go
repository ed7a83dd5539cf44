package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/probes"
)

// `mbench steps` shows every timed part and gpu_us per path, says which
// batch each belongs to, whether GPU time was measured (or why not), and
// every hook the engine could not apply.
func TestStepsCommandPerPath(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "engine_step.jsonl")
	lines := []string{
		`{"ts_us":5,"status":"engine","pid":7,"vllm":"0.18.1","path":"batch_queue","gpu_time":"measured","gpu_hook":"CUDA events around GPUModelRunner._model_forward","incomplete":[{"hook":"Scheduler.update_from_output","reason":"not a patchable method"}]}`,
		`{"ts_us":10,"step_duration_us":600.5,"schedule_us":100.25,"launch_us":150.0,"wait_us":300.125,"unaccounted_us":50.125,"gpu_us":250.5,"batch":1,"batch_queue":1,"pid":7}`,
		`{"ts_us":20,"step_duration_us":900.0,"schedule_us":100.0,"execute_us":700.0,"update_us":50.0,"unaccounted_us":50.0,"gpu_us":611.0,"batch":2,"pid":7}`,
	}
	if err := os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, context.Background(), "steps", log)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, "│")
		if len(f) > 3 {
			for i := range f {
				f[i] = strings.TrimSpace(f[i])
			}
			rows[f[2]] = f[1:]
		}
	}
	bq, step := rows["batch queue"], rows["step()"]
	if len(bq) < 15 || len(step) < 15 {
		t.Fatalf("want a row per path:\n%s", out)
	}
	// file path n_steps step-p50 p90 p99 schedule build_meta launch execute wait update get_finished gpu unaccounted
	if bq[8] != "150" || bq[9] != "—" || bq[10] != "300" || bq[13] != "250" {
		t.Errorf("batch-queue row %q", bq)
	}
	if step[8] != "—" || step[9] != "700" || step[13] != "611" {
		t.Errorf("step row %q", step)
	}
	for _, want := range []string{
		"wait, update, gpu = the EARLIER batch it collected",
		"every timer is of the step's one batch",
		log + ": GPU time measured (gpu_us on 2 steps; CUDA events around GPUModelRunner._model_forward)",
		log + ": decomposition incomplete: Scheduler.update_from_output: not a patchable method",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	out, _, err = runCLI(t, context.Background(), "steps", "--json", log)
	if err != nil {
		t.Fatal(err)
	}
	var js []stepsFile
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js) != 1 {
		t.Fatalf("%v: %s", err, out)
	}
	if g := js[0].Steps.GPU; !g.Measured || js[0].Steps.Paths["batch_queue"].Timers["launch_us"].N != 1 {
		t.Errorf("json %+v", js[0].Steps)
	}
}

// gpuWords never passes a host-bound span off as GPU time.
func TestGPUWordsHostBound(t *testing.T) {
	for _, tc := range []struct {
		g    probes.GPUTiming
		want string
	}{
		{probes.GPUTiming{Measured: true, Steps: 190, HostBound: 10, HostBoundSpanP50: 1123.5},
			"GPU time measured (gpu_us on 190 steps; 10 host-bound spans left out: the GPU reached the forward's start event before the host had launched it, so each span holds host time, an upper bound (p50 1124 µs))"},
		{probes.GPUTiming{HostBound: 200, Reason: "every GPU-timed batch (200) was host-bound"},
			"GPU time not measured: every GPU-timed batch (200) was host-bound"},
		{probes.GPUTiming{Measured: true, Steps: 5}, "GPU time measured (gpu_us on 5 steps)"},
	} {
		if got := gpuWords(tc.g); got != tc.want {
			t.Errorf("%+v:\n got %s\nwant %s", tc.g, got, tc.want)
		}
	}
}
