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

	"github.com/mbench/mbench/openloop/stub"
	"github.com/mbench/mbench/results"
)

// TestLoadSLOGoodput: `mbench load --slo` writes slo_met, request_goodput
// and slo_attainment equal to a count made here from requests.jsonl, against
// two stubs round-robined: a fast one that fails every fifth request (HTTP
// 500, in the attainment's denominator) and one whose first token comes
// after 80 ms, beyond the 40 ms TTFT bound. Without --slo the fields are
// absent.
func TestLoadSLOGoodput(t *testing.T) {
	t.Parallel()
	fast, err := stub.Start(stub.Options{FirstToken: 2 * time.Millisecond, Tokens: 4, Fault: func(n int64, _ string) stub.Fault {
		if n%5 == 4 {
			return stub.Fault{Status: 500, Body: "boom"}
		}
		return stub.Fault{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	slow, err := stub.Start(stub.Options{FirstToken: 80 * time.Millisecond, Tokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	load := func(extra ...string) (string, sloRunSummary) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "load")
		args := append([]string{"load", "--url", fast.URL, "--url", slow.URL, "--rate", "50", "--input", "8", "--output", "4",
			"--requests", "40", "--model", "stub-model", "--max-failed", "0.5", "--format", "json", "--out", out}, extra...)
		stdout, stderr, err := runCLI(t, ctx, args...)
		if err != nil && exitStatus(err) != exitNoResult { // the verdict does not matter here: the 500s make it incomplete
			t.Fatalf("load: %v\n%s", err, stderr)
		}
		var s sloRunSummary
		if err := json.Unmarshal([]byte(stdout), &s); err != nil {
			t.Fatalf("stdout is not the summary: %v\n%s", err, stdout)
		}
		return out, s
	}

	slo := results.SLO{TTFTMs: 40, TPOTMs: 50, E2ELMs: 500}
	out, s := load("--slo", "ttft_ms=40, tpot_ms=50,e2el_ms=500")
	good, answered, _ := checkRunGoodput(t, out, s, slo)
	t.Logf("%d of %d answered requests met the SLO (%d completed)", good, answered, s.Completed)
	// The slow stub's half can never meet 40 ms, and the 500s are answered
	// but not completed: the count must have split the requests.
	if good == 0 || good > answered/2 || answered <= s.Completed {
		t.Errorf("%d good of %d answered, %d completed: the stubs did not split the requests as designed", good, answered, s.Completed)
	}

	data, err := os.ReadFile(filepath.Join(out, "summary_A.json"))
	if err != nil || !strings.Contains(string(data), `"request_goodput"`) {
		t.Errorf("summary_A.json lacks the goodput written to stdout: %v", err)
	}
	if _, s := load(); s.SLO != nil || s.SLOMet != nil || s.Goodput != nil || s.SLOAttainment != nil {
		t.Errorf("without --slo the summary has SLO fields: %+v", s)
	}
}

// TestSLOFlag: --slo takes the matrix's keys or vllm's KEY:MS form; bad
// values are usage errors naming the bound.
func TestSLOFlag(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want *results.SLO
		err  string
	}{
		{"", nil, ""},
		{"ttft_ms=500", &results.SLO{TTFTMs: 500}, ""},
		{"ttft_ms=500,tpot_ms=50,e2el_ms=8000", &results.SLO{TTFTMs: 500, TPOTMs: 50, E2ELMs: 8000}, ""},
		{"ttft:500, e2el:2.5", &results.SLO{TTFTMs: 500, E2ELMs: 2.5}, ""},
		{"ttft_ms=0", nil, "ttft_ms"},
		{"tpot_ms=-1", nil, "tpot_ms"},
		{"e2el_ms=Inf", nil, "e2el_ms"},
		{"e2el_ms=NaN", nil, "e2el_ms"},
		{"ttft_ms=1,ttft=2", nil, "twice"},
		{"itl_ms=5", nil, "unknown bound"},
		{"ttft_ms", nil, "KEY=MS"},
		{"ttft_ms=1,", nil, "KEY=MS"},
	}
	for _, c := range cases {
		got, err := parseSLOFlag(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: err %v, want one naming %q", c.in, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.in, err)
		case c.err == "" && (got == nil) != (c.want == nil), got != nil && c.want != nil && *got != *c.want:
			t.Errorf("%q: %+v, want %+v", c.in, got, c.want)
		}
	}
	_, _, err := runCLI(t, context.Background(), "load", "--url", "http://127.0.0.1:1", "--rate", "1", "--input", "1",
		"--output", "1", "--requests", "1", "--slo", "ttft_ms=fast", "--out", t.TempDir())
	if exitStatus(err) != 2 || !strings.Contains(err.Error(), "ttft_ms") {
		t.Errorf("load --slo ttft_ms=fast: %v (exit %d), want a usage error naming ttft_ms", err, exitStatus(err))
	}
}

// FuzzSLOFlag: any --slo value gives an SLO with bounds > 0 or an error,
// never a panic.
func FuzzSLOFlag(f *testing.F) {
	for _, s := range []string{"ttft_ms=500,tpot_ms=50,e2el_ms=8000", "ttft:1", "=,", "e2el_ms=1e400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		o, err := parseSLOFlag(v)
		if err != nil || o == nil {
			return
		}
		for _, b := range []float64{o.TTFTMs, o.TPOTMs, o.E2ELMs} {
			if b < 0 || math.IsNaN(b) || math.IsInf(b, 0) {
				t.Fatalf("%q: bound %v", v, b)
			}
		}
		if *o == (results.SLO{}) {
			t.Fatalf("%q: an SLO without bounds", v)
		}
	})
}
