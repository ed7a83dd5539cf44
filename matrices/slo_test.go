package matrices

import (
	"strings"
	"testing"

	"github.com/mbench/mbench/results"
)

func TestSLO(t *testing.T) {
	const base = "name: t\nseed: 1\nengine: {kind: sim}\nconfigs: {plain: {}}\nrates: [1]\nshapes: [{input: 16, output: 4}]\nmeasure: {min_completed: 10}\n"
	plain, err := Parse("m.yaml", []byte(base))
	if err != nil || plain.SLO != nil {
		t.Fatalf("without slo: %+v, %v", plain.SLO, err)
	}
	for _, tc := range []struct {
		yaml     string
		want     results.SLO
		resolved string
	}{
		{"slo: {ttft_ms: 500}", results.SLO{TTFTMs: 500}, `"slo":{"ttft_ms":500}`},
		{"slo: {tpot_ms: 12.5, e2el_ms: 3000}", results.SLO{TPOTMs: 12.5, E2ELMs: 3000}, `"slo":{"e2el_ms":3000,"tpot_ms":12.5}`},
		{"slo:\n  ttft_ms: 200\n  tpot_ms: 40\n  e2el_ms: 2000", results.SLO{TTFTMs: 200, TPOTMs: 40, E2ELMs: 2000}, `"slo":{"e2el_ms":2000,"tpot_ms":40,"ttft_ms":200}`},
	} {
		m, err := Parse("m.yaml", []byte(base+tc.yaml+"\n"))
		if err != nil || m.SLO == nil || *m.SLO != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v", tc.yaml, m, err, tc.want)
			continue
		}
		js, err := m.Resolved()
		if err != nil || !strings.Contains(string(js), tc.resolved) {
			t.Errorf("%q: resolved matrix lacks %s: %s (%v)", tc.yaml, tc.resolved, js, err)
		}
		// The SLO shapes the analysis, not the load: cells keep their ids,
		// but the sweep's plan (its hash) records it.
		if m.Cells()[0].ID != plain.Cells()[0].ID {
			t.Errorf("%q: the slo changed the cell id", tc.yaml)
		}
		if m.Hash == plain.Hash {
			t.Errorf("%q: the slo is not part of the matrix hash", tc.yaml)
		}
	}
	for _, bad := range []string{"slo: {}", "slo: 5", "slo: {ttft_ms: 0}", "slo: {ttft_ms: .nan}", "slo: {ttft: 5}", "slo: {tpot_ms: [1]}"} {
		if _, err := Parse("m.yaml", []byte(base+bad+"\n")); err == nil || !strings.Contains(err.Error(), "m.yaml:8: slo") {
			t.Errorf("%q: error %v, want one at m.yaml:8 naming slo", bad, err)
		}
	}
}
