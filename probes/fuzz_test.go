package probes

import (
	"bytes"
	"context"
	"io"
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
	typical := bytes.TrimSpace(genBlock(1))
	typicalFrac := bytes.TrimSpace(genBlockFrac(1))
	f.Add(typicalFrac)
	// Both paths, wait_us on some lines: a parser warmed on these has a
	// widened template with optional keys.
	fresh, _ := io.ReadAll(newFreshLogReader(8, 6, -1))
	freshLines := bytes.Split(bytes.TrimSpace(fresh), []byte("\n"))
	for _, l := range freshLines {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var slow StepRecord
		var slowTs bool
		slowErr := parseSlow(line, &slow, &slowTs)
		check := func(path string, rec StepRecord, ts bool, skip uint32) {
			t.Helper()
			if slowErr != nil {
				t.Fatalf("%s accepted %q, encoding/json says %v", path, line, slowErr)
			}
			want := slow
			for i := range want.Values { // skipped fields are validated, not stored
				if skip&(1<<uint(i)) != 0 {
					want.Values[i], rec.Values[i] = 0, 0
					want.Has &^= 1 << uint(i)
				}
			}
			if rec != want || ts != slowTs {
				t.Fatalf("%s %q:\n got %+v ts %v\nslow %+v ts %v", path, line, rec, ts, want, slowTs)
			}
		}
		for _, skip := range []uint32{0, stepSkip} {
			// scanFast, with key-order guesses from the line itself.
			sp := stepParser{skip: skip}
			var tmp StepRecord
			sp.parse(line, &tmp)
			var rec StepRecord
			var ts bool
			if scanFast(&sp, line, &rec, &ts) {
				check("scanFast", rec, ts, skip)
			}
			// scanTemplate, with the template of a typical line, then of the line.
			for _, warm := range [][][]byte{{typical}, {typicalFrac}, {line}, freshLines, append(freshLines[:3:3], line)} {
				sp := stepParser{skip: skip}
				for _, w := range warm {
					sp.parse(w, &tmp)
				}
				rec, ts = StepRecord{}, false
				if sp.scanTemplate(line, &rec, &ts) {
					check("scanTemplate", rec, ts, skip)
				}
			}
		}
	})
}

// FuzzSummarizeSteps feeds arbitrary bytes as a whole log: no panic, and
// every record is either a step or malformed (blank lines aside). A log's
// records are text lines and binary records, each of which begins with
// the mark 0xFF (never in JSON), which also ends a text line: so there are
// at most as many records as non-blank pieces between newlines and marks,
// plus the marks.
func FuzzSummarizeSteps(f *testing.F) {
	f.Add([]byte("{\"ts_us\":1,\"step_duration_us\":2}\n\n{bad\n"))
	f.Fuzz(func(t *testing.T, log []byte) {
		st, err := SummarizeSteps(context.Background(), bytes.NewReader(log), 0, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		nonBlank := 0
		for _, l := range bytes.Split(log, []byte("\n")) {
			for _, piece := range bytes.Split(l, []byte{recMark}) {
				if len(bytes.Trim(piece, " \t\r\n")) > 0 {
					nonBlank++
				}
			}
		}
		marks := bytes.Count(log, []byte{recMark})
		if st.NSteps+st.Malformed > int64(nonBlank+marks) {
			t.Fatalf("%d steps + %d malformed > %d non-blank text pieces + %d record marks", st.NSteps, st.Malformed, nonBlank, marks)
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
