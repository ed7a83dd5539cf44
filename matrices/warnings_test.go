package matrices

import (
	"strings"
	"testing"
)

func TestWarnings(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want []string // parts of each warning, in order
	}{
		{"none", `name: w
seed: 1
engine: {kind: sim}
configs: {plain: {}}
rates: [5]
shapes: [{input: 100, output: 10}]
measure: {min_completed: 40, timeout: 30s}
`, nil},
		{"rate too low for the timeout", `name: w
seed: 1
engine: {kind: sim}
configs: {plain: {}}
rates: [0.1, 5]
shapes: [{input: 100, output: 10}]
measure: {min_completed: 40, timeout: 30s}
`, []string{"m.yaml:7: measure.timeout: at rate 0.1 req/s, measure.timeout 30s sends about 3 requests, fewer than min_completed 40"}},
		{"sim max model length", `name: w
seed: 1
engine: {kind: sim, sim: {max-model-len: "2048"}}
configs: {plain: {}}
rates: [5]
shapes: [{input: 4096, output: 64}]
measure: {min_completed: 4, timeout: 30s}
`, []string{"shapes.4096x64: prompts of up to 4160 input + output tokens exceed config plain's max model length 2048 (sim max-model-len)"}},
		{"vllm --max-model-len, last one wins", `name: w
seed: 1
hosts: {local: {address: local, gpus: [0]}}
engine: {kind: vllm, model: m, command: "vllm serve {{.Model}} --port {{.Port}} --max-model-len 8192 {{.ConfigArgs}}"}
configs: {big: {}, small: {args: [--max-model-len, "1024"]}}
rates: [5]
shapes: [{input: 2000, output: 100}]
measure: {min_completed: 4, timeout: 30s}
`, []string{"config small's max model length 1024 (--max-model-len)"}},
		// vLLM takes --max_model_len as --max-model-len.
		{"vllm --max_model_len", `name: w
seed: 1
hosts: {local: {address: local, gpus: [0]}}
engine: {kind: vllm, model: m, command: "vllm serve {{.Model}} --port {{.Port}} {{.ConfigArgs}}"}
configs: {small: {args: ["--max_model_len=1024"]}}
rates: [5]
shapes: [{input: 2000, output: 100}]
measure: {min_completed: 4, timeout: 30s}
`, []string{"config small's max model length 1024 (--max-model-len)"}},
		// A rate so low that no timeout would do: no overflowed number.
		{"tiny rate", `name: w
seed: 1
engine: {kind: sim}
configs: {plain: {}}
rates: [1e-300]
shapes: [{input: 100, output: 10}]
measure: {min_completed: 40, timeout: 30s}
`, []string{"sends about 3e-299 requests, fewer than min_completed 40: every run of shape 100x10 at this rate will be incomplete (at this rate they take 4e+301 s to send: raise the rate or lower min_completed)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Parse("m.yaml", []byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			ws := m.Warnings()
			if len(ws) != len(c.want) {
				t.Fatalf("got %d warnings %v, want %d", len(ws), ws, len(c.want))
			}
			for i, w := range ws {
				if s := w.String("m.yaml"); !strings.Contains(s, c.want[i]) {
					t.Errorf("warning %d = %q, want it to contain %q", i, s, c.want[i])
				}
			}
		})
	}
}

// TestMooncakeRouterWarnings: a splitting router in front of
// MooncakeConnector instances is warned about unless it speaks the bootstrap
// protocol, with bootstrap ports and a bootstrap_port to wait on.
func TestMooncakeRouterWarnings(t *testing.T) {
	const head = "name: w\nseed: 1\nengine: {kind: vllm, command: \"vllm serve {{.Model}} --port {{.Port}} {{.ConfigArgs}}\", model: m}\n" +
		"hosts: {h: {address: local, gpus: [0, 1]}}\nrates: [1]\nshapes: [{input: 16, output: 4}]\nmeasure: {min_completed: 10}\nconfigs:\n  c:\n" +
		"    topology: {instances_per_host: 2, gpus_per_instance: 1}\n    kv_transfer_config: {kv_connector: MooncakeConnector, kv_role: kv_both}\n"
	for _, tc := range []struct{ extra, want string }{
		{"    router: {command: \"{{.Self}} router --addr {{.Bind}}:{{.RouterPort}} --offload {{.Targets}}\", port: 9090}\n", "every split request will fail with 502"},
		{"    router: {command: \"{{.Self}} router --addr {{.Bind}}:{{.RouterPort}} --offload --kv-protocol mooncake {{.Targets}}\", port: 9090}\n", "no bootstrap_port"},
		{"    bootstrap_port: 8998\n    router: {command: \"{{.Self}} router --addr {{.Bind}}:{{.RouterPort}} --offload --kv-protocol mooncake {{.Targets}}\", port: 9090}\n", "without --bootstrap-ports"},
		{"    bootstrap_port: 8998\n    router: {command: \"{{.Self}} router --addr {{.Bind}}:{{.RouterPort}} --offload --kv-protocol mooncake --bootstrap-ports {{.BootstrapPorts}} {{.Targets}}\", port: 9090}\n", ""},
		{"    router: {command: \"{{.Self}} router --addr {{.Bind}}:{{.RouterPort}} {{.Targets}}\", port: 9090}\n", ""}, // nothing split
	} {
		m, err := Parse("w.yaml", []byte(head+tc.extra))
		if err != nil {
			t.Fatalf("%s: %v", tc.extra, err)
		}
		var got []string
		for _, w := range m.Warnings() {
			got = append(got, w.Msg)
		}
		if tc.want == "" && len(got) > 0 || tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)) {
			t.Errorf("%s: warnings %q, want one with %q", tc.extra, got, tc.want)
		}
	}
}
