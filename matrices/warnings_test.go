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
