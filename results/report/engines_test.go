package report

import (
	"testing"

	"github.com/mbench/mbench/results"
)

// TestEngineNames: the report names llama-server's kind with the engine,
// keeps vllm's and sim's as recorded, and says "writes no per-step log"
// only when every cell is of a kind that never writes one.
func TestEngineNames(t *testing.T) {
	for kind, want := range map[string]string{"llamacpp": "llamacpp (llama.cpp llama-server)", "vllm": "vllm", "sim": "sim", "external": "external"} {
		if got := engineLabel(kind); got != want {
			t.Errorf("engineLabel(%q) = %q, want %q", kind, got, want)
		}
	}
	cell := func(engine string) *results.Cell { c := &results.Cell{}; c.Sum.Engine = engine; return c }
	if got := stepless([]*results.Cell{cell("llamacpp"), cell("llamacpp")}); got != "llama.cpp llama-server" {
		t.Errorf("stepless(llamacpp cells) = %q", got)
	}
	for _, cs := range [][]*results.Cell{{cell("vllm")}, {cell("llamacpp"), cell("vllm")}, {cell("")}, {}} {
		if got := stepless(cs); got != "" {
			t.Errorf("stepless(%d cells) = %q, want \"\"", len(cs), got)
		}
	}
}
