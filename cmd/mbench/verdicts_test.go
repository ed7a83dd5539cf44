package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/hangguard"
)

// TestVerdictsOfMisbehavingEngines: an engine that fails its requests one
// way or another gives runs that are not results, each with the verdict and
// failure class that say what happened; the sweep exits 3 naming the cell,
// and report.md says it in words.
func TestVerdictsOfMisbehavingEngines(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("sim sweeps")
	}
	cases := []struct {
		name    string
		sim     string // the config's sim flags
		measure string // replaces the matrix's measure line, when set
		verdict string
		class   string // the failure class every failed request has ("" = none)
		reason  string // a part of the journal's reason
	}{
		{"http500", "{fault: http500}", "", "errors", "http_5xx", "measured requests failed"},
		{"http429", "{fault: http429}", "", "errors", "http_429", "measured requests failed"},
		{"context length", "{max_model_len: 32}", "", "errors", "context_length", "measured requests failed"},
		{"malformed SSE", "{fault: malformed}", "", "errors", "malformed_stream", "measured requests failed"},
		{"closed mid-stream", "{fault: truncate}", "", "errors", "incomplete_stream", "measured requests failed"},
		{"empty stream", "{fault: empty}", "", "errors", "empty_stream", "measured requests failed"},
		{"usage 50x the tokens", "{fault: bad_usage}", "", "errors", "usage_mismatch", "measured requests failed"},
		{"hang", "{fault: hang}", "measure: {min_completed: 20, timeout: 2s, drain_timeout: 1s}", "incomplete", "drained",
			"0 of the 20 measured requests required completed before measure.timeout"},
		{"cut short by the timeout", "{}", "measure: {min_completed: 400, timeout: 2s, drain_timeout: 1s}", "incomplete", "",
			"of the 400 measured requests required completed before measure.timeout"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			m, out := filepath.Join(dir, "m.yaml"), filepath.Join(dir, "out")
			writeSimMatrix(t, m, map[string]string{"%CONFIGS%": "  plain:\n    sim: " + c.sim, "%RATES%": "20", "%BLOCKS%": "1"})
			if c.measure != "" {
				data, _ := os.ReadFile(m)
				body := strings.Replace(string(data), "measure: {warmup_requests: 3, min_completed: 20, timeout: 20s, drain_timeout: 3s}", c.measure, 1)
				writeTestFile(t, m, []byte(body))
			}
			ctx, cancel := hangguard.Context(t)
			defer cancel()
			stdout, stderr, err := runCLI(t, ctx, "run", m, "--out", out, "--quiet")
			ec, ok := err.(exitCoder)
			if !ok || ec.ExitCode() != exitNoResult || !strings.Contains(err.Error(), "(plain rate=20 64x8): 1 "+c.verdict) {
				t.Fatalf("run: %v; want exit 3 naming the cell and its verdict %s\n%s\n%s", err, c.verdict, stdout, stderr)
			}
			if !strings.Contains(stderr, "sweep done: 1 runs: 1 "+c.verdict) {
				t.Errorf("stderr lacks the verdict count:\n%s", stderr)
			}
			j := readJSONL(t, filepath.Join(out, "journal.jsonl"))
			if len(j) != 1 || j[0]["status"] != c.verdict || !strings.Contains(j[0]["reason"].(string), c.reason) {
				t.Fatalf("journal %v: want one run %s with a reason containing %q", j, c.verdict, c.reason)
			}
			var sum struct {
				Verdict   string         `json:"verdict"`
				Failed    int            `json:"failed"`
				Completed int            `json:"completed"`
				Errors    map[string]int `json:"errors"`
			}
			data, err := os.ReadFile(filepath.Join(out, j[0]["dir"].(string), "summary_A.json"))
			if err != nil || json.Unmarshal(data, &sum) != nil {
				t.Fatalf("summary: %v", err)
			}
			if sum.Verdict != c.verdict {
				t.Errorf("summary verdict %q, want %q", sum.Verdict, c.verdict)
			}
			// Requests in flight when the run stopped are cut by the harness
			// (canceled, drained); every other failure has the engine's class.
			other := sum.Failed
			for k := range map[string]bool{c.class: true, "canceled": true, "drained": true} {
				other -= sum.Errors[k]
			}
			if c.class != "" && (sum.Errors[c.class] == 0 || other != 0) {
				t.Errorf("errors %v (failed %d): want the failures of class %s, and no other class but canceled or drained", sum.Errors, sum.Failed, c.class)
			}
			for k := range sum.Errors {
				if strings.ContainsAny(k, " :") {
					t.Errorf("free-text error key %q", k)
				}
			}
			rep, err := os.ReadFile(filepath.Join(out, "report.md"))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"1 runs: 1 " + c.verdict + ".", "**" + c.verdict + "** — ", "missing (1 " + c.verdict + ")"} {
				if !strings.Contains(string(rep), want) {
					t.Errorf("report.md lacks %q", want)
				}
			}
			if strings.Contains(string(rep), "None: every cell has a usable run") {
				t.Error("report.md says every cell has a usable run")
			}
		})
	}
}
