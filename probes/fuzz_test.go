package probes

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
)

// FuzzParseStepLine checks the hand-rolled fast path against encoding/json:
// whenever the fast path accepts a line, the slow path must accept it with
// the same result; and ParseStepLine must never panic.
func FuzzParseStepLine(f *testing.F) {
	for _, s := range []string{
		`{"ts_us":1780000000000087,"step_duration_us":66,"schedule_us":7,"build_meta_us":24}`,
		`{"ts_us":1.5e3,"step_duration_us":-0,"x":"y","t":true,"n":null}`,
		`{"ts_us":12,"step_duration_us":3,"ts_us":14,"execute_us":null}`,
		`{"ts_u\u0073":15,"step_duration_us":4}`,
		`{"ts_us":16,"step_duration_us":01}`,
		` { "ts_us" : 1 , "step_duration_us" : 2.25 } `,
		`{"ts_us":99999999999999999999,"step_duration_us":1e400}`,
		`{}`, `[]`, `null`, `{"a":{"b":[1]}}`, `{"ts_us":-}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var fast, slow StepRecord
		var fastTs, slowTs bool
		var sp stepParser
		sp.parse(line, &fast) // warm the key-order guesses with the line itself
		fast = StepRecord{}
		if !scanFast(&sp, line, &fast, &fastTs) {
			return
		}
		if err := parseSlow(line, &slow, &slowTs); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json says %v", line, err)
		}
		if fast != slow || fastTs != slowTs {
			t.Fatalf("%q:\nfast %+v ts %v\nslow %+v ts %v", line, fast, fastTs, slow, slowTs)
		}
	})
}

// FuzzSummarizeSteps feeds arbitrary bytes as a whole log: no panic, and
// every line is either a step or malformed (blank lines aside).
func FuzzSummarizeSteps(f *testing.F) {
	f.Add([]byte("{\"ts_us\":1,\"step_duration_us\":2}\n\n{bad\n"))
	f.Fuzz(func(t *testing.T, log []byte) {
		st, err := SummarizeSteps(context.Background(), bytes.NewReader(log), 0, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		nonBlank := 0
		for _, l := range bytes.Split(log, []byte("\n")) {
			if len(bytes.Trim(l, " \t\r\n")) > 0 {
				nonBlank++
			}
		}
		if st.NSteps+st.Malformed > int64(nonBlank) {
			t.Fatalf("%d steps + %d malformed > %d non-blank lines", st.NSteps, st.Malformed, nonBlank)
		}
	})
}

// FuzzParseMetrics: no panic; a text that parses yields finite values and
// keeps parsing the same after a round trip through its own sample lines.
func FuzzParseMetrics(f *testing.F) {
	f.Add([]byte(readTestdata(f, "vllm_metrics.txt")))
	f.Add([]byte("# TYPE a counter\na_total{x=\"1\"} 1\n{\"b.c\",y=\"\\\"\"} 2 1700000000\n"))
	f.Add([]byte("a{b=\"c\" 1\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		m, err := ParseMetrics(bytes.NewReader(text))
		if err != nil {
			if !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		for k, v := range m {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%s: non-finite %v", k, v)
			}
		}
	})
}
