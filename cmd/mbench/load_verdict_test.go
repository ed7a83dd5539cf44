package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// TestLoadVerdictsOfRealisticRuns: `mbench load` against servers that are
// healthy but slow to finish, that fail some requests, that stream nothing
// or that misreport usage: each run ends in the verdict, reason, exit status
// and summary counts that say what happened.
func TestLoadVerdictsOfRealisticRuns(t *testing.T) {
	// The verdict is the subject: the one each case's server causes, or a
	// timing verdict that outranks it with its reason (verdictFollows).
	t.Parallel()
	cases := []struct {
		name    string
		opts    stub.Options
		extra   []string
		code    int
		verdict string
		reason  string         // part of the exit message ("" when ok)
		errors  map[string]int // the summary's errors
		marks   [2]int         // usage_missing_requests, short_output_requests
	}{
		// 16 tokens 100 ms apart: each request takes 1.5 s, longer than the
		// ~1 s over which the 20 were sent. Was graded saturated.
		{"long outputs", stub.Options{Gap: 100 * time.Millisecond}, nil, 0, "ok", "", map[string]int{}, [2]int{}},
		// Every 5th request an instant 400; --max-failed 0.3 allows it.
		{"a fifth fail, allowed", stub.Options{Fault: everyFifth(stub.Fault{Status: 400, Body: "bad request"})},
			[]string{"--max-failed", "0.3"}, 0, "ok", "", map[string]int{"http_4xx": 4}, [2]int{}},
		// The same at the default 1%: errors, and only errors.
		{"a fifth fail", stub.Options{Fault: everyFifth(stub.Fault{Status: 400, Body: "bad request"})},
			nil, exitNoResult, "errors", "not a result: errors: 4 of 20 measured requests failed (4 http_4xx), more than --max-failed 0.01 allows",
			map[string]int{"http_4xx": 4}, [2]int{}},
		{"empty streams", stub.Options{Fault: always(stub.Fault{Empty: true})}, nil, exitNoResult, "errors",
			"not a result: errors: 20 of 20 measured requests failed (20 empty_stream)", map[string]int{"empty_stream": 20}, [2]int{}},
		{"usage above max_tokens", stub.Options{Fault: always(stub.Fault{Usage: func(int) int { return 400 }})}, nil, exitNoResult, "errors",
			"not a result: errors: 20 of 20 measured requests failed (20 usage_mismatch)", map[string]int{"usage_mismatch": 20}, [2]int{}},
		{"no usage", stub.Options{Fault: always(stub.Fault{NoUsage: true})}, nil, 0, "ok", "", map[string]int{}, [2]int{20, 0}},
		// An engine that stops after 3 of the 16 tokens asked for, with
		// fixed lengths: the run measured shorter outputs than asked.
		{"stopped early", stub.Options{Tokens: 3}, nil, exitNoResult, "short_outputs",
			"not a result: short_outputs: 20 of 20 completed measured requests ended before the tokens asked for with fixed lengths (on average 18.8% of them; finish reasons: 20 length)",
			map[string]int{}, [2]int{0, 20}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.opts.FirstToken = 10 * time.Millisecond
			srv, err := stub.Start(c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			out := filepath.Join(t.TempDir(), "load")
			args := append([]string{"load", "--url", srv.URL, "--rate", "20", "--arrival", "constant", "--input", "8", "--output", "16",
				"--requests", "20", "--model", "stub-model", "--out", out}, c.extra...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, stderr, runErr := runCLI(t, ctx, args...)
			data, err := os.ReadFile(filepath.Join(out, "summary_A.json"))
			if err != nil {
				t.Fatalf("%v (the run: %v)", err, runErr)
			}
			var s struct {
				Verdict      string         `json:"verdict"`
				Reasons      []string       `json:"verdict_reasons"`
				Errors       map[string]int `json:"errors"`
				ThrRatio     float64        `json:"thr_ratio"`
				UsageMissing int            `json:"usage_missing_requests"`
				ShortOutputs int            `json:"short_output_requests"`
			}
			if err := json.Unmarshal(data, &s); err != nil {
				t.Fatal(err)
			}
			// Reasons other than timing's (timingReason): the load generator
			// falling behind, or a rising TTFT where the stub's own first token
			// always comes after a fixed 10 ms.
			n := 0
			for _, r := range s.Reasons {
				if !timingReason(r) {
					n++
				}
			}
			if !verdictFollows(s.Verdict, c.verdict, s.Reasons) || (c.verdict != "ok" && n != 1) {
				t.Errorf("verdict %s reasons %q, want %s with one reason of its own", s.Verdict, s.Reasons, c.verdict)
			}
			code := exitNoResult
			if s.Verdict == "ok" {
				code = 0
			}
			if got := exitStatus(runErr); got != code || (c.reason != "" && !strings.Contains(runErr.Error(), c.reason)) {
				t.Fatalf("exit %d (%v), want %d with %q\n%s", got, runErr, code, c.reason, stderr)
			}
			if len(s.Errors) != len(c.errors) {
				t.Errorf("errors %v, want %v", s.Errors, c.errors)
			}
			for k, n := range c.errors {
				if s.Errors[k] != n {
					t.Errorf("errors %v, want %v", s.Errors, c.errors)
				}
			}
			if [2]int{s.UsageMissing, s.ShortOutputs} != c.marks {
				t.Errorf("usage_missing/short_output requests %d/%d, want %v", s.UsageMissing, s.ShortOutputs, c.marks)
			}
			if s.Errors["http_4xx"] == 0 && s.Errors["empty_stream"] == 0 && s.Errors["usage_mismatch"] == 0 && s.ThrRatio != 1 {
				t.Errorf("thr_ratio %v, want 1: every request finished", s.ThrRatio)
			}
		})
	}
}

// always is a stub fault for every request.
func always(f stub.Fault) func(int64, string) stub.Fault {
	return func(int64, string) stub.Fault { return f }
}

// everyFifth is a stub fault for every 5th request in arrival order.
func everyFifth(f stub.Fault) func(int64, string) stub.Fault {
	return func(n int64, _ string) stub.Fault {
		if n%5 == 4 {
			return f
		}
		return stub.Fault{}
	}
}
