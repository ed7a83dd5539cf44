package matrices

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
)

// Parse decodes and validates a matrix from data, as Load does without
// reading a file or checking that trace files exist; file names it in
// errors and anchors relative trace paths.
func Parse(file string, data []byte) (*Matrix, error) {
	return parse(file, data, false)
}

const minimalSim = "name: x\nseed: 1\nengine: {kind: sim}\nconfigs: {a: {}, b: }\nrates: [1]\nshapes: [{input: 8, output: 2}]\nmeasure: {min_completed: 3}\n"

// TestDefaults checks every documented default on a minimal matrix.
func TestDefaults(t *testing.T) {
	m := mustParse(t, "x.yaml", minimalSim)
	if !reflect.DeepEqual(m.HostOrder, []string{"local"}) || !m.Hosts["local"].IsLocal() || m.Hosts["local"].HostKeyPolicy != "strict" || m.Hosts["local"].Workdir != "~/.mbench" {
		t.Errorf("hosts %+v", m.Hosts)
	}
	e := m.Engine
	if e.Command != DefaultSimCommand || e.Model != "sim-model" || e.ReadyTimeout != 5*time.Minute || e.Grace != 10*time.Second || e.Stagger != 0 || e.Port != 8000 || e.Restart != "on_change" {
		t.Errorf("engine %+v", e)
	}
	if !reflect.DeepEqual(m.Configs["b"].Topology, Topology{InstancesPerHost: 1, GPUsPerInstance: 1}) {
		t.Errorf("topology %+v", m.Configs["b"].Topology)
	}
	if !reflect.DeepEqual(m.Measure, Measure{MinCompleted: 3, Timeout: 10 * time.Minute, DrainTimeout: time.Minute}) {
		t.Errorf("measure %+v", m.Measure)
	}
	if m.Repeat != (Repeat{Min: 3, Max: 3, Metric: "ttft_p90", RelCI: 0.05, Confidence: 0.95, Randomize: true}) {
		t.Errorf("repeat %+v", m.Repeat)
	}
	if m.Arrival != (openloop.Arrival{Process: "poisson", Burstiness: 1}) || m.Baseline != "a" || !reflect.DeepEqual(m.Compare, results.DefaultCompare) {
		t.Errorf("arrival %+v baseline %s compare %v", m.Arrival, m.Baseline, m.Compare)
	}
	if m.Gate != (Gate{Enabled: true, TempBandC: 3, Timeout: 5 * time.Minute, MemToleranceMiB: 512}) || m.Probe != (Probe{Interval: 250 * time.Millisecond, ThrottleMaxFraction: 0.1}) {
		t.Errorf("gate %+v probe %+v", m.Gate, m.Probe)
	}
	if m.Shapes[0].Name != "8x2" {
		t.Errorf("shape name %q", m.Shapes[0].Name)
	}
	l, err := m.Launch("a", Runtime{Self: func(string) string { return "/bin/mb" }, StepLog: func(string, int) string { return "/s/x.jsonl" }, Bind: "0.0.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Instances[0].Command; got != "/bin/mb sim --addr 0.0.0.0:8000 --step-log /s/x.jsonl --model sim-model" {
		t.Errorf("sim command %q", got)
	}
	if len(l.Instances[0].Env) != 0 || l.Instances[0].GPUs != nil {
		t.Errorf("sim instance without GPUs got env %v gpus %v", l.Instances[0].Env, l.Instances[0].GPUs)
	}
}

// TestMergeKeysAndAliases: YAML anchors and << merges work, explicit keys win.
func TestMergeKeysAndAliases(t *testing.T) {
	src := `
name: x
seed: 1
hosts: {h: {address: local, gpus: [0]}}
engine: {kind: vllm, command: "serve {{.ConfigArgs}}", model: m}
configs:
  base: &base
    kv_transfer_config: {kv_connector: MooncakeConnector, kv_role: kv_both}
    args: [--a]
  prod:
    <<: *base
    kv_transfer_config: {kv_connector: MooncakeConnector, kv_role: kv_producer}
  multi:
    <<: [*base, {args: [--ignored], env: {E: "1"}}]
rates: [1]
shapes: [{input: 8, output: 2}]
measure: {min_completed: 3}
`
	m := mustParse(t, "x.yaml", src)
	if got := m.Configs["prod"]; got.KVTransferConfig["kv_role"] != "kv_producer" || !reflect.DeepEqual(got.Args, []string{"--a"}) {
		t.Errorf("prod %+v", got)
	}
	if got := m.Configs["multi"]; got.KVTransferConfig["kv_role"] != "kv_both" || !reflect.DeepEqual(got.Args, []string{"--a"}) || got.Env["E"].Value != "1" {
		t.Errorf("multi %+v", got)
	}
}

func TestCheckAddress(t *testing.T) {
	for a, ok := range map[string]bool{"local": true, "dash0": true, "user@dash0": true, "dash0:2222": true,
		"u@10.0.0.1:22": true, "[::1]:22": true, "fe80::1": true, "": false, "-oProxyCommand=x": false,
		"a b": false, "@host": false, "host:": false, "host:0": false, "host:70000": false, "[::1": false, "u@": false} {
		if got := checkAddress(a) == ""; got != ok {
			t.Errorf("checkAddress(%q) ok=%v, want %v (%s)", a, got, ok, checkAddress(a))
		}
	}
}

// largeTopology is a matrix of 1024 sim instances behind a router.
var largeTopology = strings.Replace(minimalSim, "configs: {a: {}, b: }", "configs: {a: {topology: {instances_per_host: 1024}, router: {command: 'r {{.Targets}}', port: 20000}}}", 1)

// TestLargeTopologyIsFast: validation renders every instance; 1024 sim
// instances behind a router parse and render whole. How cheap that stays
// is BenchmarkLargeTopology's (against 32 instances in the same run).
func TestLargeTopologyIsFast(t *testing.T) {
	m := mustParse(t, "x.yaml", largeTopology)
	l, err := m.Launch("a", Runtime{})
	if err != nil || len(l.Instances) != 1024 || strings.Count(l.Router.Command, "http://") != 1024 {
		t.Fatalf("launch: %v", err)
	}
}

// BenchmarkLargeTopology parses and renders 1024 instances, and 32 as the
// reference: linear work reads 32 in the ratio.
//
//	go test ./matrices -run '^$' -bench LargeTopology
func BenchmarkLargeTopology(b *testing.B) {
	for _, n := range []int{32, 1024} {
		src := strings.Replace(largeTopology, "instances_per_host: 1024", "instances_per_host: "+strconv.Itoa(n), 1)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				m, err := Parse("x.yaml", []byte(src))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := m.Launch("a", Runtime{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestThrottleMaxFraction: probe.throttle_max_fraction defaults to 0.1; the
// default leaves the resolved matrix (and so the hash of a matrix written
// before the field existed) unchanged, another value changes it.
func TestThrottleMaxFraction(t *testing.T) {
	def := mustParse(t, "x.yaml", minimalSim)
	same := mustParse(t, "x.yaml", minimalSim+"probe: {throttle_max_fraction: 0.1}\n")
	other := mustParse(t, "x.yaml", minimalSim+"probe: {throttle_max_fraction: 0.25}\n")
	if def.Probe.ThrottleMaxFraction != DefaultThrottleMaxFraction || other.Probe.ThrottleMaxFraction != 0.25 {
		t.Errorf("fractions %v %v", def.Probe.ThrottleMaxFraction, other.Probe.ThrottleMaxFraction)
	}
	if def.Hash != same.Hash || def.Hash == other.Hash {
		t.Errorf("hashes: default %s, explicit default %s, 0.25 %s", def.Hash, same.Hash, other.Hash)
	}
}
