package matrices

import (
	"github.com/mbench/mbench/results"
	"go.yaml.in/yaml/v3"
)

// sloKeys are the keys of the slo section, in documentation order.
var sloKeys = []string{"ttft_ms", "tpot_ms", "e2el_ms"}

// slo decodes the optional slo section: a mapping of at least one of
// ttft_ms, tpot_ms, e2el_ms, each a positive number of milliseconds.
func (d *decoder) slo(v *yaml.Node, m *Matrix) {
	if v == nil {
		return
	}
	var s results.SLO
	targets := []*float64{&s.TTFTMs, &s.TPOTMs, &s.E2ELMs}
	fields := make([]field, len(sloKeys))
	for i, k := range sloKeys {
		fields[i] = field{name: k, set: func(v *yaml.Node, p string) { *targets[i], _ = d.number(v, p, true) }}
	}
	n := len(d.errs)
	if !d.object(v, "slo", v.Line, fields) || len(d.errs) > n {
		return
	}
	if s == (results.SLO{}) {
		d.add(v.Line, "slo", "a mapping such as {ttft_ms: 500, tpot_ms: 50}", "at least one of ttft_ms, tpot_ms, e2el_ms is required")
		return
	}
	m.SLO = &s
}

// sloSpec is the slo section of the resolved matrix: only the bounds set.
func sloSpec(s *results.SLO) map[string]float64 {
	out := map[string]float64{}
	for i, x := range []float64{s.TTFTMs, s.TPOTMs, s.E2ELMs} {
		if x > 0 {
			out[sloKeys[i]] = x
		}
	}
	return out
}
