package matrices

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

const baseYAML = `
name: stab
seed: 7
hosts:
  gpu0: {address: dash0, gpus: [0, 1]}
engine:
  kind: vllm
  command: vllm serve {{.Model}} --port {{.Port}} {{.ConfigArgs}}
  model: m1
  env: {A: "1", B: "2"}
configs:
  plain: {}
  mc:
    kv_transfer_config: {kv_connector: MooncakeConnector, kv_role: kv_both}
    args: [--x, "1"]
    env: {C: "3"}
  plain_aa: {same_as: plain}
rates: [0.5, 1, 2]
shapes:
  - {name: a, input: 64, output: 8}
  - {name: b, input: 128, output: 16}
measure: {warmup_requests: 2, min_completed: 10}
repeat: {min: 2}
`

// reorderedYAML is baseYAML with keys, configs, rates, shapes, flow/block
// style and number spelling changed, and non-cell settings edited.
const reorderedYAML = `
shapes:
  - {output: 16, input: 128, name: b}
  - name: a
    output: 8
    input: 64
rates: [2, 1.0, 0.5]   # same rates, other order and spelling
configs:
  plain_aa: {same_as: plain}
  mc:
    env: {C: "3"}
    args: [--x, "1"]
    kv_transfer_config: {kv_role: kv_both, kv_connector: MooncakeConnector}
  plain: {}
engine:
  env: {B: "2", A: "1"}
  model: m1
  command: vllm serve {{.Model}} --port {{.Port}} {{.ConfigArgs}}
  kind: vllm
  ready_timeout: 20m
seed: 7
hosts:
  gpu0: {gpus: [0, 1], address: dash0}
measure: {min_completed: 10, warmup_requests: 2}
repeat: {min: 5, max: 9}
name: stab-renamed
baseline: mc
compare: [ttft_p99]
gate: {enabled: false}
`

func ids(t *testing.T, src string) map[string]string {
	t.Helper()
	m, err := Parse("stab.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, src)
	}
	out := map[string]string{}
	for _, c := range m.Cells() {
		k := fmt.Sprintf("%s|%g|%s", c.Config, c.Rate, c.Shape)
		if _, dup := out[k]; dup {
			t.Fatalf("duplicate cell %s", k)
		}
		out[k] = c.ID
	}
	return out
}

var hexID = regexp.MustCompile(`^[0-9a-f]{12}$`)

func TestCellIDStableUnderReordering(t *testing.T) {
	a, b := ids(t, baseYAML), ids(t, reorderedYAML)
	if len(a) != 18 {
		t.Fatalf("%d cells, want 3 configs × 3 rates × 2 shapes", len(a))
	}
	for k, id := range a {
		if b[k] != id {
			t.Errorf("cell %s: id %s became %s after reordering", k, id, b[k])
		}
	}
	seen := map[string]string{}
	for k, id := range a {
		if !hexID.MatchString(id) {
			t.Errorf("id %q is not 12 hex digits", id)
		}
		if prev, dup := seen[id]; dup {
			t.Errorf("cells %s and %s share id %s", k, prev, id)
		}
		seen[id] = k
	}
}

// TestCellIDChangesOnSemanticChange edits one thing at a time; each edit
// must change the ids of exactly the cells it affects.
func TestCellIDChangesOnSemanticChange(t *testing.T) {
	base := ids(t, baseYAML)
	cases := []struct {
		name, old, new string
		affects        string // "" = every cell; else a substring of the affected cell keys
	}{
		{"seed", "seed: 7", "seed: 8", ""},
		{"command", "--port {{.Port}} {{.ConfigArgs}}", "--port {{.Port}} --enforce-eager {{.ConfigArgs}}", ""},
		{"model", "model: m1", "model: m2", ""},
		{"engine env", `A: "1"`, `A: "9"`, ""},
		{"instrument", "  model: m1\n", "  model: m1\n  instrument: true\n", ""},
		{"kv_role", "kv_role: kv_both}", "kv_role: kv_producer}", "mc|"},
		{"config env", `C: "3"`, `C: "4"`, "mc|"},
		{"args", `args: [--x, "1"]`, `args: ["1", --x]`, "mc|"},
		{"topology", "plain: {}", "plain: {topology: {instances_per_host: 2}}", "plain"},
		{"shape input", "{name: a, input: 64,", "{name: a, input: 65,", "|a"},
		{"shape name", "{name: b,", "{name: bb,", "|b"},
		{"arrival", "repeat: {min: 2}", "repeat: {min: 2}\narrival: {process: constant}", ""},
		{"min_completed", "min_completed: 10}", "min_completed: 11}", ""},
		{"warmup", "warmup_requests: 2,", "warmup_requests: 3,", ""},
		{"drain", "min_completed: 10}", "min_completed: 10, drain_timeout: 2m}", ""},
		{"request_timeout", "min_completed: 10}", "min_completed: 10, request_timeout: 30s}", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(baseYAML, tc.old, tc.new, 1)
			if src == baseYAML {
				t.Fatalf("edit %q not applied", tc.old)
			}
			got := ids(t, src)
			for k, id := range base {
				nk := k
				if tc.name == "shape name" {
					nk = strings.Replace(k, "|b", "|bb", 1)
				}
				affected := tc.affects == "" || strings.Contains(k, tc.affects)
				if changed := got[nk] != id; changed != affected {
					t.Errorf("cell %s: changed=%v, want %v", k, changed, affected)
				}
			}
		})
	}
}

// TestTwinDistinctIDSameLaunchKey: an A/A twin is its own cell but launches
// exactly like its target, so the engine is reused.
func TestTwinDistinctIDSameLaunchKey(t *testing.T) {
	m := mustParse(t, "stab.yaml", baseYAML)
	byCfg := map[string]Cell{}
	for _, c := range m.Cells() {
		if c.Rate == 1 && c.Shape == "a" {
			byCfg[c.Config] = c
		}
	}
	if byCfg["plain"].ID == byCfg["plain_aa"].ID {
		t.Errorf("twin shares cell id %s with plain", byCfg["plain"].ID)
	}
	if byCfg["plain_aa"].SameAs != "plain" {
		t.Errorf("twin SameAs = %q", byCfg["plain_aa"].SameAs)
	}
	rt := Runtime{Self: func(string) string { return "/opt/mbench" }, StepLog: func(h string, i int) string { return "/tmp/s.jsonl" }}
	lp, err1 := m.Launch("plain", rt)
	la, err2 := m.Launch("plain_aa", rt)
	lm, err3 := m.Launch("mc", rt)
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatal(err1, err2, err3)
	}
	if lp.Key != la.Key || la.Config != "plain_aa" {
		t.Errorf("twin key %s (config %s) vs plain %s", la.Key, la.Config, lp.Key)
	}
	if lm.Key == lp.Key {
		t.Errorf("mc and plain share launch key %s", lm.Key)
	}
	lp2, err := m.Launch("plain", Runtime{Bind: "0.0.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if lp2.Key == lp.Key {
		t.Error("launch key ignores the runtime (step log / self)")
	}
}

func TestEstimateDuration(t *testing.T) {
	m := mustParse(t, "stab.yaml", baseYAML)
	// Per run: 12 requests / rate + min(1m drain, 10s); rates 0.5, 1, 2.
	perRun := 12/0.5 + 12/1 + 12/2.0 + 3*10
	runs := perRun * 2 * 3 // 2 shapes, 3 configs
	got := m.EstimateDuration().Seconds()
	// Two distinct launch keys over 18 cells (plain and its twin share one).
	lo, hi := 2*(runs+1*120), 2*(runs+18*120)
	if got < lo || got > hi {
		t.Errorf("estimate %.0fs outside [%.0f, %.0f]", got, lo, hi)
	}
}
