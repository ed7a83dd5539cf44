package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mbench/mbench/probes"
)

// TestProbeGateWithoutGPU: without NVML, `probe --gate` says so on stderr
// and prints a skipped gate result (no baseline, so no baseline record).
func TestProbeGateWithoutGPU(t *testing.T) {
	t.Parallel()
	if _, closeLib, err := probes.OpenNVML(); err == nil {
		closeLib()
		t.Skip("NVML works here: the gate would measure this machine's GPUs")
	}
	out, errOut, err := runCLI(t, context.Background(), "probe", "--gate", "--timeout", "1s", "--own-pgid", "42")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	var res struct {
		Baseline *probes.BaselineRecord `json:"baseline"`
		probes.GateResult
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not the gate JSON: %v\n%s", err, out)
	}
	if !res.Skipped || res.Baseline != nil || res.Polls != 0 || !strings.Contains(errOut, "NVML unavailable") {
		t.Errorf("result %+v, stderr %q; want skipped with NVML named", res, errOut)
	}
}
