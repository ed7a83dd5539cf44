package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/mbench/mbench/results"
)

// parseSLOFlag reads `mbench load --slo`: comma-separated bounds in
// milliseconds, each KEY=MS with KEY one of ttft_ms, tpot_ms, e2el_ms (the
// matrix's slo: keys), or vllm bench serve's --goodput form KEY:MS with KEY
// ttft, tpot or e2el. Each bound at most once, each a finite number > 0;
// nil for an empty value (no SLO).
func parseSLOFlag(v string) (*results.SLO, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var o results.SLO
	seen := map[string]bool{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		key, val, ok := strings.Cut(part, "=")
		if !ok {
			key, val, ok = strings.Cut(part, ":")
		}
		if !ok {
			return nil, fmt.Errorf("--slo %q: %q is not KEY=MS (keys ttft_ms, tpot_ms, e2el_ms)", v, part)
		}
		key = strings.TrimSuffix(strings.TrimSpace(key), "_ms")
		ms, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || !(ms > 0) || math.IsInf(ms, 0) {
			return nil, fmt.Errorf("--slo %q: %s: %q is not a number of milliseconds > 0", v, key+"_ms", strings.TrimSpace(val))
		}
		if seen[key] {
			return nil, fmt.Errorf("--slo %q: %s given twice", v, key+"_ms")
		}
		seen[key] = true
		switch key {
		case "ttft":
			o.TTFTMs = ms
		case "tpot":
			o.TPOTMs = ms
		case "e2el":
			o.E2ELMs = ms
		default:
			return nil, fmt.Errorf("--slo %q: unknown bound %q (valid: ttft_ms, tpot_ms, e2el_ms)", v, key)
		}
	}
	return &o, nil
}
