package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStoppingRuleClaimIsThePrintedCI: a sweep the stopping rule ends says
// "converged" only when every primary comparison's CI as export prints it
// is within the target, and report.md's stop line says so.
func TestStoppingRuleClaimIsThePrintedCI(t *testing.T) {
	defer parallel(t)()
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
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
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
	if !st.Stop.ByRule {
		j, _ := os.ReadFile(filepath.Join(out, "journal.jsonl"))
		t.Skipf("the rule did not end the sweep (a busy machine's runs are not results): %s\n%s\n%s", st.Stop.Reason, b, j)
	}
	if !st.Stop.Converged || !strings.HasPrefix(st.Stop.Reason, "converged: ") {
		t.Errorf("stopped by the rule but %q (converged %v)", st.Stop.Reason, st.Stop.Converged)
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
	n := 0
	for _, c := range js.Comparisons {
		if c.Metric != "ttft_p90" {
			continue
		}
		n++
		if half := (c.Hi - c.Lo) / 2; c.N < 2 || half > 0.5 {
			t.Errorf("%s: printed CI [%+.3f, %+.3f] over %d blocks, half-width %.3f above the target 0.5 the sweep claims to have met", c.Config, c.Lo, c.Hi, c.N, half)
		}
		for k, h := range st.Stop.CompHalf {
			if strings.HasPrefix(k, c.Config+" vs ") && math.Abs(h-(c.Hi-c.Lo)/2) > 1e-9 {
				t.Errorf("%s: the rule's half-width %v is not the printed %v", k, h, (c.Hi-c.Lo)/2)
			}
		}
	}
	if n == 0 {
		t.Fatal("no primary comparison in the export")
	}
	rep, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(rep), "converged: every comparison on the primary metric ttft_p90 has a 95% CI half-width ≤ ±50.0%") {
		t.Errorf("report.md does not give the stop in the rule's words")
	}
}
