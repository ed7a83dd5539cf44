package report

import (
	"strings"
	"testing"

	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/results"
)

// TestEnergyNote: the method section says where GPU energy came from, and
// marks power integration as the fallback.
func TestEnergyNote(t *testing.T) {
	run := func(src ...string) *results.Run {
		g := &results.GPUSummary{Available: true}
		for _, s := range src {
			g.PerGPU = append(g.PerGPU, probes.GPUStat{EnergySource: s})
		}
		return &results.Run{Sum: &results.RunSummary{GPU: g}}
	}
	cells := func(runs ...*results.Run) []*results.Cell { return []*results.Cell{{Runs: runs}} }
	for _, c := range []struct {
		cells []*results.Cell
		want  string
	}{
		{cells(&results.Run{Sum: &results.RunSummary{}}), ""},
		{cells(run(probes.EnergyFromCounter), run(probes.EnergyFromCounter)), "counter: its rise from the first to the last sample of each run (2 GPU-runs)"},
		{cells(run(probes.EnergyFromPower)), "**Integrated from power readings** on all 1 GPU-runs (a fallback"},
		{cells(run(probes.EnergyFromCounter, probes.EnergyFromPower)), "counter on 1 GPU-runs; **integrated from power readings on 1** (a fallback"},
	} {
		got := energyNote(c.cells)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("energyNote = %q, want it to contain %q", got, c.want)
		}
	}
}
