package report

import (
	"github.com/mbench/mbench/engines"
	"github.com/mbench/mbench/results"
)

// engineLabel is a run's engine kind as the report names it: the kind and
// the engine ("llamacpp (llama.cpp llama-server)"); vLLM's and the sim's
// kinds, and kinds mbench does not know, as recorded.
func engineLabel(kind string) string {
	p, err := engines.Lookup(engines.Kind(kind))
	if err != nil || p.Kind == engines.VLLM || p.Simulated {
		return kind
	}
	return kind + " (" + p.Name + ")"
}

// stepless is the name of the engine when every cell's runs are of one
// engine kind that writes no per-step log, else "".
func stepless(cells []*results.Cell) string {
	name := ""
	for _, c := range cells {
		p, err := engines.Lookup(engines.Kind(c.Sum.Engine))
		if err != nil || p.StepLog != engines.StepLogNever || (name != "" && name != p.Name) {
			return ""
		}
		name = p.Name
	}
	return name
}
