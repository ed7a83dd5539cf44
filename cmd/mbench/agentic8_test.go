package main

// matrices/agentic8.yaml — seed 003's whole experiment — end to end on
// simulated engines: the matrix as written (configs, router commands with
// the bootstrap protocol, bootstrap ports, trace, request limit, sessions,
// request timeout, fresh restarts, class bounds), with only what ties it to
// the GPU host replaced: the engine is kind sim (the elastic config's
// MooncakeConnector kv_transfer_config becomes the sim's model of it), the
// host is local, the ports are the test's, the trace is replayed 10× faster
// and each cell runs one block.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/hangguard"
)

// onSim rewrites agentic8.yaml for the sim; every replaced text must be
// there, so a change of the matrix fails here rather than silently testing
// something else.
func onSim(t *testing.T, src, trace string, port, bootstrap, routerPort int) string {
	t.Helper()
	engine := src[strings.Index(src, "\nhosts:"):strings.Index(src, "\nconfigs:")]
	out := strings.Replace(src, engine, `
engine:
  kind: sim
  model: sim-model
  port: `+strconv.Itoa(port)+`
  ready_timeout: 1m
  grace: 5s
  restart: every_run
  sim: {step_base_us: 1000, prefill_token_us: 0.2, decode_seq_us: 20, kv_blocks: 12500, token_budget: 8192}
`, 1)
	for _, r := range []struct{ old, new string }{
		{"{hosts: [gpu0], instances_per_host: 8, gpus_per_instance: 1}", "{instances_per_host: 8}"},
		{"kv_transfer_config: {kv_connector: MooncakeConnector, kv_role: kv_both}",
			"sim: {kv_connector: MooncakeConnector, kv_role: kv_both, kv_transfer_us_per_token: 0.02}"},
		{"bootstrap_port: 8998", "bootstrap_port: " + strconv.Itoa(bootstrap)},
		{"port: 9090", "port: " + strconv.Itoa(routerPort)},
		{"path: testdata/traces/synthetic_agentic_1000.jsonl", "path: " + trace},
		{"time_scale: 20", "time_scale: 200"},
		{"  min: 3\n  max: 6\n", "  min: 1\n  max: 1\n"},
	} {
		if !strings.Contains(out, r.old) {
			t.Fatalf("agentic8.yaml has no %q: update this test with the matrix", r.old)
		}
		out = strings.ReplaceAll(out, r.old, r.new)
	}
	return out
}

func TestAgentic8OnSim(t *testing.T) {
	t.Parallel()
	longTest(t)
	if testing.Short() {
		t.Skip("end-to-end sweep of 3 configs × 8 sims")
	}
	src, err := os.ReadFile("../../matrices/agentic8.yaml")
	if err != nil {
		t.Fatal(err)
	}
	trace, err := filepath.Abs("../../matrices/testdata/traces/synthetic_agentic_1000.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	engines, boot, router := freePortBase(t), freePortBase(t), freePortBase(t)
	ep, _ := strconv.Atoi(engines)
	bp, _ := strconv.Atoi(boot)
	rp, _ := strconv.Atoi(router)
	dir := t.TempDir()
	m := writeMatrix(t, dir, onSim(t, string(src), trace, ep, bp, rp))
	out := filepath.Join(dir, "out")
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	if stdout, stderr, err := runSweepCLI(t, ctx, "run", m, "--out", out, "--quiet"); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	type run struct {
		config string
		dir    string
		sum    map[string]any
	}
	var runs []run
	for _, l := range readJSONL(t, filepath.Join(out, "journal.jsonl")) {
		if st, _ := l["status"].(string); !slices.Contains([]string{"ok", "client_limited", "saturated"}, st) {
			t.Fatalf("run %v: status %v (%v)", l["cell"], st, l["reason"])
		}
		rd := filepath.Join(out, l["dir"].(string))
		var sum map[string]any
		data, err := os.ReadFile(filepath.Join(rd, "summary_A.json"))
		if err != nil || json.Unmarshal(data, &sum) != nil {
			t.Fatalf("run %v: summary: %v", l["cell"], err)
		}
		runs = append(runs, run{sum["config"].(string), rd, sum})
	}
	if len(runs) != 3 {
		t.Fatalf("%d runs, want linear, lmetric and elastic once each", len(runs))
	}
	var classIDs []string
	for _, r := range runs {
		if n := r.sum["num_prompts"].(float64); n != 200 {
			t.Errorf("%s: %v requests, want the 200 of seed 003", r.config, n)
		}
		// The classes are the trace's: the same requests in the same
		// class under every config.
		cls := r.sum["classes"].(map[string]any)
		ids, _ := json.Marshal(func() []any {
			var out []any
			for _, c := range cls["by_class"].([]any) {
				out = append(out, c.(map[string]any)["ids"])
			}
			return out
		}())
		classIDs = append(classIDs, string(ids))
		if cls["basis"] != "ideal_new_tokens" {
			t.Errorf("%s: class basis %v", r.config, cls["basis"])
		}
		routes := readJSONL(t, filepath.Join(r.dir, "routing.jsonl"))
		offloads := 0
		for _, e := range routes {
			if e["split"] == "offload" {
				offloads++
				if e["transfer_id"] == nil || e["status"].(float64) != 200 || !(e["decode_sent_ms"].(float64) < e["prefill_ms"].(float64)) {
					t.Errorf("%s: offloaded request %v: %v", r.config, e["id"], e)
				}
			}
		}
		if want := r.config == "elastic"; (offloads > 0) != want {
			t.Errorf("%s: %d offloaded requests (HEAVY > 20k new tokens go to another instance only under elastic)", r.config, offloads)
		}
		if r.config == "elastic" {
			per := r.sum["instances"].(map[string]any)["per_instance"].([]any)
			ext := 0.0
			for _, x := range per {
				v, _ := x.(map[string]any)["external_hit_rate"].(float64)
				ext += v
			}
			if len(per) != 8 || ext == 0 {
				t.Errorf("elastic: %d instances, external hit rates summing to %v: want 8, the offloads' decodes receiving KV", len(per), ext)
			}
			t.Logf("elastic: %d of %d requests offloaded through the bootstrap protocol", offloads, len(routes))
		}
	}
	if classIDs[0] != classIDs[1] || classIDs[1] != classIDs[2] {
		t.Error("the configs' request classes hold different requests")
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Request classes", "Prefix cache by instance", "| elastic | agentic | 1 |"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}
