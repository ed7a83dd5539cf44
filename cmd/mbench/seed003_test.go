package main

// Seed 003's experiments through the CLI on the sim: a sweep whose configs
// route through `mbench router` (cache-aware, and PD-separated 2P+2D over
// MooncakeConnector sims with the bootstrap protocol) keeps each run's
// routing log and breakdown, and its summaries and report carry latency by
// request class and the prefix cache per instance.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const routedSweep = `name: routed
seed: 3
engine:
  kind: sim
  port: %PORT%
  ready_timeout: 20s
  grace: 2s
  restart: every_run
  sim: {step_base_us: 400, prefill_token_us: 0.1, decode_seq_us: 5, kv_blocks: 4096}
configs:
  linear:
    topology: {instances_per_host: 4}
    router: {command: "{{.Self}} router --addr {{.Bind}}:{{.RouterPort}} --class-bounds {{.ClassBounds}} --policy linear {{.Targets}}", port: %RPORT%}
  pd_sep:
    topology: {instances_per_host: 4}
    sim: {kv_transfer_us_per_token: 0.1, kv_connector: MooncakeConnector}
    bootstrap_port: %BPORT%
    pd:
      producers: 2
      producer: {sim: {kv_role: kv_producer}, env: {VLLM_MOONCAKE_BOOTSTRAP_PORT: "{{.BootstrapPort}}"}}
      consumer: {sim: {kv_role: kv_consumer}}
    router: {command: "{{.Self}} router --addr {{.Bind}}:{{.RouterPort}} --class-bounds {{.ClassBounds}} --policy linear --kv-protocol mooncake --bootstrap-ports {{.BootstrapPorts}} --prefill {{.Producers}} {{.Targets}}", port: %RPORT%}
rates: [1]
shapes:
  - name: agentic
    trace: {path: %TRACE%, time_scale: 25, request_limit: 60, max_inflight_sessions: 4}
measure: {warmup_requests: 4, min_completed: 56, timeout: 30s, drain_timeout: 5s}
repeat: {min: 1, max: 1}
class_bounds: [1000, 2000, 3000]
gate: {enabled: false}
`

func TestSeed003RoutedSweep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep")
	}
	base := freePortBase(t)
	p, _ := strconv.Atoi(base)
	body := strings.NewReplacer("%PORT%", base, "%RPORT%", strconv.Itoa(p+7), "%BPORT%", strconv.Itoa(p+4)).Replace(routedSweep)
	// A run graded saturated or client_limited (a starved machine) still
	// has every file this test is about.
	runs := runWorkloadSweep(t, body, 2)
	out := filepath.Dir(filepath.Dir(filepath.Dir(runs[0].dir)))
	for _, r := range runs {
		config := r.summary["config"].(string)
		// The routing log has a line per request the load sent, by id.
		routes := readJSONL(t, filepath.Join(r.dir, "routing.jsonl"))
		byID := map[string]map[string]any{}
		for _, e := range routes {
			byID[e["id"].(string)] = e
		}
		for _, rec := range r.recs {
			e := byID[strconv.Itoa(rec.ID)]
			if e == nil {
				t.Fatalf("%s: request %d is not in routing.jsonl", r.key, rec.ID)
			}
			inst, pre := int(e["instance"].(float64)), int(e["prefill_instance"].(float64))
			if config == "pd_sep" && (inst > 1 || pre < 2) {
				t.Errorf("%s: request %d prefilled on %d, decoded on %d: want a producer (2, 3) then a consumer (0, 1)", r.key, rec.ID, pre, inst)
			}
		}
		var bd struct {
			Requests int `json:"requests"`
		}
		data, err := os.ReadFile(filepath.Join(r.dir, "breakdown.json"))
		if err != nil || json.Unmarshal(data, &bd) != nil || bd.Requests != len(r.recs) {
			t.Errorf("%s: breakdown.json %s (%v): want %d requests", r.key, data, err, len(r.recs))
		}
		// Classes: every completed measured request in exactly one class,
		// by its ideal-cache new tokens (the same class under both configs).
		cls := r.summary["classes"].(map[string]any)
		n := 0.0
		for _, c := range cls["by_class"].([]any) {
			n += c.(map[string]any)["completed"].(float64)
		}
		if cls["basis"] != "ideal_new_tokens" || cls["depends_on_routing"] != false || n != r.summary["completed"].(float64) {
			t.Errorf("%s: classes %v (%v completed in classes of %v)", r.key, cls, n, r.summary["completed"])
		}
		if config == "pd_sep" {
			// Concurrent legs: the router sends the decode leg without
			// waiting for the prefill's answer, so it goes out first on
			// most requests; a loaded machine can run the decode's send
			// after a quick prefill answered on some (a router that waited
			// would do so on every one). router's TestMooncakePD holds
			// each leg to it exactly.
			early := 0
			for _, e := range routes {
				if e["transfer_id"] == nil || e["split"] != "pd" {
					t.Errorf("%s: PD request %v not split by the bootstrap protocol", r.key, e["id"])
					break
				}
				if e["decode_sent_ms"].(float64) < e["prefill_ms"].(float64) {
					early++
				}
			}
			if 2*early < len(routes) {
				t.Errorf("%s: the decode leg went out before the prefill answered on %d of %d requests: want most (concurrent legs)", r.key, early, len(routes))
			}
		}
		per := r.summary["instances"].(map[string]any)["per_instance"].([]any)
		if len(per) != 4 {
			t.Fatalf("%s: %d instances in the summary, want 4", r.key, len(per))
		}
		if config == "pd_sep" {
			for i, x := range per {
				ext, _ := x.(map[string]any)["external_hit_rate"].(float64)
				if consumer := i >= 2; consumer != (ext > 0.3) {
					t.Errorf("%s: instance %d external hit rate %v (consumers are 2 and 3)", r.key, i, ext)
				}
			}
		}
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	// Figures come from usable runs only, whatever timing graded the others
	// (client_limited, saturated): the sections exist when any run is
	// usable, a config's class rows when its own are; the prefix-cache
	// table has a row for every cell, its pooled rate "—" without one.
	usable := map[string]bool{}
	for _, r := range runs {
		if r.summary["verdict"] == "ok" {
			usable[r.summary["config"].(string)] = true
		}
	}
	// section is report.md's section under "## title" up to the next one;
	// "" where the section is one line (nothing to show).
	section := func(title string) string {
		_, rest, ok := strings.Cut(string(report), "\n## "+title+"\n")
		if !ok {
			return ""
		}
		body, _, _ := strings.Cut(rest, "\n## ")
		return body
	}
	classes, cache := section("Request classes"), section("Prefix cache by instance")
	for _, want := range []struct {
		name      string
		got, want bool
	}{{"the request classes table", classes != "", len(usable) > 0},
		{"linear's WARM row", strings.Contains(classes, "| linear | agentic | 1 | WARM |"), usable["linear"]},
		{"the prefix-cache table", cache != "", len(usable) > 0},
		{"pd_sep's prefix-cache row", strings.Contains(cache, "| pd_sep | agentic | 1 |"), len(usable) > 0},
		{"pd_sep's pooled hit rate", strings.Contains(cache, "| pd_sep | agentic | 1 |") && !strings.Contains(cache, "| pd_sep | agentic | 1 | — |"), usable["pd_sep"]},
	} {
		if want.got != want.want {
			t.Errorf("report.md shows %s: %v, want %v (usable runs by config: %v)", want.name, want.got, want.want, usable)
		}
	}
}
