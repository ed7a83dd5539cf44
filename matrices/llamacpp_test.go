package matrices

import (
	"strings"
	"testing"

	"github.com/mbench/mbench/openloop"
)

const minimalLlamaCpp = `name: x
seed: 1
hosts: {cpu: {address: local}, gpu: {address: local, gpus: [3]}}
engine:
  kind: llamacpp
  command: "llama-server -m {{.Model}} --host {{.Bind}} --port {{.Port}} --metrics -t 1 {{.ConfigArgs}}"
  model: /m/tiny.gguf
configs:
  cpu: {args: [-np, "4"], topology: {hosts: [cpu], gpus_per_instance: 0}}
  gpu: {args: [-ngl, "99"], topology: {hosts: [gpu]}}
rates: [1]
shapes: [{input: 8, output: 2}]
measure: {min_completed: 3}
`

// TestLlamaCppKind: kind llamacpp renders its command with the config's
// args, runs CPU-only instances (gpus_per_instance 0) without a GPU or
// CUDA_VISIBLE_DEVICES, pins a GPU instance's GPUs, and enters
// engine.token_ids into the hash only when it is set.
func TestLlamaCppKind(t *testing.T) {
	m := mustParse(t, "x.yaml", minimalLlamaCpp)
	rt := Runtime{StepLog: func(string, int) string { return "/s/x.jsonl" }}
	l, err := m.Launch("cpu", rt)
	if err != nil {
		t.Fatal(err)
	}
	in := l.Instances[0]
	if in.Command != "llama-server -m /m/tiny.gguf --host 127.0.0.1 --port 8000 --metrics -t 1 -np 4" || in.GPUs != nil || len(in.Env) != 0 {
		t.Errorf("cpu instance: command %q gpus %v env %v", in.Command, in.GPUs, in.Env)
	}
	if l, err = m.Launch("gpu", rt); err != nil {
		t.Fatal(err)
	}
	if in := l.Instances[0]; len(in.Env) != 1 || in.Env[0] != (EnvVar{Name: "CUDA_VISIBLE_DEVICES", Value: "3"}) || !strings.HasSuffix(in.Command, "-ngl 99") {
		t.Errorf("gpu instance: command %q env %v", in.Command, in.Env)
	}
	if !m.Engine.TokenIDs.IsZero() {
		t.Errorf("token ids %v without engine.token_ids", m.Engine.TokenIDs)
	}
	withIDs := mustParse(t, "x.yaml", strings.Replace(minimalLlamaCpp, "  model: /m/tiny.gguf\n", "  model: /m/tiny.gguf\n  token_ids: {min: 300, max: 20000}\n", 1))
	if withIDs.Engine.TokenIDs != (openloop.TokenRange{Min: 300, Max: 20000}) {
		t.Errorf("token ids %v, want [300, 20000)", withIDs.Engine.TokenIDs)
	}
	if withIDs.Hash == m.Hash {
		t.Error("engine.token_ids changes the prompts but not the matrix hash")
	}
	js, _ := m.Resolved()
	if strings.Contains(string(js), "token_ids") {
		t.Errorf("resolved matrix without engine.token_ids mentions it: %s", js)
	}
	vllm := strings.NewReplacer("kind: llamacpp", "kind: vllm").Replace(minimalLlamaCpp)
	if _, err := Parse("x.yaml", []byte(vllm)); err == nil || !strings.Contains(err.Error(), "a vLLM instance needs at least one GPU") {
		t.Errorf("kind vllm with gpus_per_instance 0: %v", err)
	}
}
