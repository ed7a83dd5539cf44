package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/hangguard"
)

// TestVerdictsOfRealisticSweeps: sweeps against an engine that is healthy
// but whose outputs outlast the send span, that fails a fifth of its
// requests, or that sends no usage: each ends in the verdict, the one
// reason, the exit status and the report line that say what happened.
func TestVerdictsOfRealisticSweeps(t *testing.T) {
	// The verdict is the subject: the one each case's engine causes, or a
	// timing verdict that outranks it with its reason (verdictFollows).
	t.Parallel()
	if testing.Short() {
		t.Skip("sim sweeps")
	}
	const measure = "measure: {warmup_requests: 3, min_completed: 20, timeout: 20s, drain_timeout: 3s}"
	cases := []struct {
		name    string
		sim     string
		edit    map[string]string // replacements in the matrix
		verdict string
		reason  string // the journal's reason, a prefix ("" when ok)
		report  string // a line of report.md
	}{
		// 200 tokens at ~11 ms a step: each request takes ~2.2 s, longer
		// than the ~1 s over which the first 20 were sent (was saturated).
		{"long outputs", "{}", map[string]string{"output: 8}": "output: 200}", "step_base_us: 1000": "step_base_us: 10000",
			"drain_timeout: 3s": "drain_timeout: 60s"}, "ok", "", "1 runs: 1 ok"},
		// The same with a drain timeout shorter than the outputs: the
		// requests still streaming are cut off; the engine kept up.
		{"outputs longer than the drain timeout", "{}", map[string]string{"output: 8}": "output: 200}", "step_base_us: 1000": "step_base_us: 10000",
			"drain_timeout: 3s": "drain_timeout: 1s"}, "incomplete",
			"incomplete: ", "1 runs: 1 incomplete."},
		{"a fifth fail, allowed", "{fault: http500, fault_every: 5}",
			map[string]string{measure: strings.Replace(measure, "}", ", max_error_rate: 0.3}", 1)}, "ok", "", "1 runs: 1 ok"},
		{"a fifth fail", "{fault: http500, fault_every: 5}", nil, "errors", "errors: ", "1 runs: 1 errors."},
		{"no usage", "{fault: no_usage}", nil, "ok", "", "completed requests had no usage chunk; their output tokens are the content chunks counted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			m, out := filepath.Join(dir, "m.yaml"), filepath.Join(dir, "out")
			writeSimMatrix(t, m, map[string]string{"%CONFIGS%": "  plain:\n    sim: " + c.sim, "%RATES%": "20", "%BLOCKS%": "1"})
			data, _ := os.ReadFile(m)
			body := string(data)
			for k, v := range c.edit {
				if !strings.Contains(body, k) {
					t.Fatalf("matrix lacks %q", k)
				}
				body = strings.Replace(body, k, v, 1)
			}
			writeTestFile(t, m, []byte(body))
			ctx, cancel := hangguard.Context(t)
			defer cancel()
			stdout, stderr, err := runCLI(t, ctx, "run", m, "--out", out, "--quiet")
			j := readJSONL(t, filepath.Join(out, "journal.jsonl"))
			if len(j) != 1 {
				t.Fatalf("run: %v\n%s\n%s\njournal %v: want one run", err, stdout, stderr, j)
			}
			got, _ := j[0]["status"].(string)
			switch {
			case got == "ok" && err != nil:
				t.Fatalf("run: %v, want exit 0 for an ok run\n%s\n%s", err, stdout, stderr)
			case got != "ok" && (exitStatus(err) != exitNoResult || !strings.Contains(err.Error(), "1 "+got)):
				t.Fatalf("run: %v, want exit 3 naming the verdict %s\n%s", err, got, stderr)
			}
			var sum struct {
				Reasons      []string       `json:"verdict_reasons"`
				Errors       map[string]int `json:"errors"`
				Completed    int            `json:"completed"`
				UsageMissing int            `json:"usage_missing_requests"`
			}
			data, err = os.ReadFile(filepath.Join(out, j[0]["dir"].(string), "summary_A.json"))
			if err != nil || json.Unmarshal(data, &sum) != nil {
				t.Fatalf("summary: %v", err)
			}
			if !verdictFollows(got, c.verdict, sum.Reasons) {
				t.Fatalf("run %s (reasons %q), want %s", got, sum.Reasons, c.verdict)
			}
			var reasons []string // the engine's, not timing's (timingReason)
			for _, r := range sum.Reasons {
				if !timingReason(r) {
					reasons = append(reasons, r)
				}
			}
			if c.reason == "" && len(reasons) != 0 || c.reason != "" && (len(reasons) != 1 || !strings.HasPrefix(reasons[0], c.reason)) {
				t.Errorf("reasons %q, want %s", sum.Reasons, map[bool]string{true: "none", false: "one, starting " + c.reason}[c.reason == ""])
			}
			if c.verdict == "incomplete" && !strings.Contains(reasons[0], "measured requests were still streaming when the harness ended the run") {
				t.Errorf("reason %q: want the requests cut off mid-stream", reasons[0])
			}
			if strings.Contains(c.sim, "http500") && sum.Errors["http_5xx"] == 0 {
				t.Errorf("errors %v: want some http_5xx", sum.Errors)
			}
			if strings.Contains(c.sim, "no_usage") && (sum.UsageMissing == 0 || sum.UsageMissing != sum.Completed) {
				t.Errorf("usage_missing_requests %d of %d completed, want all", sum.UsageMissing, sum.Completed)
			}
			// The report's count line names the run's verdict.
			want := c.report
			if got != c.verdict {
				want = strings.Replace(want, "1 "+c.verdict, "1 "+got, 1)
			}
			rep, err := os.ReadFile(filepath.Join(out, "report.md"))
			if err != nil || !strings.Contains(string(rep), want) {
				t.Errorf("report.md lacks %q (%v)", want, err)
			}
		})
	}
}
