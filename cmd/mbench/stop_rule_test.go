package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/hangguard"
)

// TestStoppingRuleClaimIsThePrintedCI: a sweep says "converged" exactly
// when every primary comparison's CI as export prints it is within the
// target, the rule's half-widths are the printed ones, and report.md's stop
// line says so. Which way it went (the rule ending the sweep, or the blocks
// running out, within target or not) is the machine's; the claim holds
// every way.
func TestStoppingRuleClaimIsThePrintedCI(t *testing.T) {
	t.Parallel()
	longTest(t)
	if testing.Short() {
		t.Skip("sim sweep")
	}
	dir := t.TempDir()
	m, out := filepath.Join(dir, "m.yaml"), filepath.Join(dir, "out")
	writeSimMatrix(t, m, map[string]string{"%RATES%": "20", "%BLOCKS%": "2"})
	data, _ := os.ReadFile(m)
	body := strings.Replace(string(data), "repeat: {min: 2, max: 2, metric: ttft_p90, rel_ci: 0.05, confidence: 0.95}",
		"repeat: {min: 4, max: 10, metric: ttft_p90, rel_ci: 0.5, confidence: 0.95}", 1)
	writeTestFile(t, m, []byte(body))
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	if _, stderr, err := runSweepCLI(t, ctx, "run", m, "--out", out, "--quiet"); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr)
	}
	var st struct {
		Stop struct {
			Reason    string             `json:"reason"`
			ByRule    bool               `json:"stopped_by_rule"`
			Converged bool               `json:"converged"`
			CompHalf  map[string]float64 `json:"comparison_half_width"`
		} `json:"stop"`
	}
	b, err := os.ReadFile(filepath.Join(out, "sweep.json"))
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("sweep.json: %v", err)
	}
	stdout, _, err := runCLI(t, ctx, "export", out, "--format", "json")
	var js struct {
		Comparisons []struct {
			Metric  string  `json:"metric"`
			Primary bool    `json:"primary"`
			Config  string  `json:"config"`
			N       int     `json:"n"`
			Lo      float64 `json:"lo"`
			Hi      float64 `json:"hi"`
		} `json:"comparisons"`
	}
	if err != nil || json.Unmarshal([]byte(stdout), &js) != nil {
		t.Fatalf("export --format json: %v", err)
	}
	n, within := 0, true
	for _, c := range js.Comparisons {
		if c.Metric != "ttft_p90" {
			continue
		}
		n++
		if half := (c.Hi - c.Lo) / 2; c.N < 2 || half > 0.5 {
			within = false
		}
		for k, h := range st.Stop.CompHalf {
			if strings.HasPrefix(k, c.Config+" vs ") && math.Abs(h-(c.Hi-c.Lo)/2) > 1e-9 {
				t.Errorf("%s: the rule's half-width %v is not the printed %v", k, h, (c.Hi-c.Lo)/2)
			}
		}
	}
	// Converged is the printed CIs' verdict whichever way the sweep ended;
	// the rule's own "converged: " stop implies it, and a sweep whose
	// blocks ran out with every CI within target says so in its reason.
	saysWithin := strings.HasPrefix(st.Stop.Reason, "converged: ") || strings.Contains(st.Stop.Reason, "CI half-width ≤ ±50.0% as the report prints it")
	if st.Stop.Converged != within || st.Stop.Converged != saysWithin || st.Stop.ByRule != strings.HasPrefix(st.Stop.Reason, "converged: ") || (st.Stop.ByRule && !st.Stop.Converged) {
		t.Errorf("stop %q (converged %v, by the rule %v), while every printed CI within the target 0.5: %v\n%s", st.Stop.Reason, st.Stop.Converged, st.Stop.ByRule, within, stdout)
	}
	if n == 0 {
		t.Fatal("no primary comparison in the export")
	}
	rep, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(rep), st.Stop.Reason) {
		t.Errorf("report.md does not give the stop in the rule's words: %q", st.Stop.Reason)
	}
	if st.Stop.ByRule && !strings.Contains(string(rep), "converged: every comparison on the primary metric ttft_p90 has a 95% CI half-width ≤ ±50.0%") {
		t.Errorf("report.md does not give the convergence in the rule's words")
	}
}
