package probes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// numpyPercentile is numpy.percentile(xs, p*100) with the default "linear"
// method, computed from a sorted copy: the independent reference.
func numpyPercentile(xs []float64, p float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	h := float64(len(s)-1) * p
	lo := int(math.Floor(h))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (h-float64(lo))*(s[hi]-s[lo])
}

func refQuantiles(xs []float64) Quantiles {
	q := Quantiles{N: int64(len(xs)), Min: math.Inf(1), Max: math.Inf(-1)}
	sum := 0.0
	for _, x := range xs {
		sum += x
		q.Min, q.Max = min(q.Min, x), max(q.Max, x)
	}
	q.Mean = sum / float64(len(xs))
	q.P50, q.P90, q.P99 = numpyPercentile(xs, .5), numpyPercentile(xs, .9), numpyPercentile(xs, .99)
	return q
}

func closeTo(a, b, rel float64) bool {
	return math.Abs(a-b) <= rel*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func checkQuantiles(t *testing.T, name string, got, want Quantiles, rel float64) {
	t.Helper()
	if got.N != want.N || !closeTo(got.Mean, want.Mean, 1e-9) || !closeTo(got.P50, want.P50, rel) ||
		!closeTo(got.P90, want.P90, rel) || !closeTo(got.P99, want.P99, rel) ||
		got.Min != want.Min || got.Max != want.Max {
		t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
	}
}

// genLog writes a step log of n steps in varied but valid shapes, plus
// malformed and blank lines, and returns the expected values per timer for
// steps inside [from, to] and the number of malformed lines.
func genLog(rng *rand.Rand, n int, from, to int64) (log []byte, want map[string][]float64, kept, malformed int) {
	var b bytes.Buffer
	want = map[string][]float64{}
	ts := int64(1_780_000_000_000_000)
	for i := 0; i < n; i++ {
		ts += 20 + rng.Int64N(400)
		vals := map[string]float64{}
		var parts []string
		parts = append(parts, fmt.Sprintf(`"ts_us":%d`, ts))
		for ti, name := range TimerNames {
			if ti > 0 && rng.IntN(4) == 0 {
				if rng.IntN(3) == 0 {
					parts = append(parts, fmt.Sprintf(`"%s":null`, name))
				}
				continue // absent
			}
			var v float64
			switch rng.IntN(10) {
			case 0:
				v = math.Round(rng.Float64()*1e5) / 100 // non-integer µs
			case 1:
				v = float64(2_000_000 + rng.IntN(1000)) // beyond the dense range
			default:
				v = float64(int(math.Exp(3 + 5*rng.Float64())))
			}
			vals[name] = v
			parts = append(parts, fmt.Sprintf(`"%s":%s`, name, strconv.FormatFloat(v, fmtByte(rng), -1, 64)))
		}
		parts = append(parts, fmt.Sprintf(`"num_running":%d`, rng.IntN(64)), `"pid":4242`)
		switch rng.IntN(20) {
		case 0:
			parts = append(parts, `"note":"plain string"`, `"ok":true`, `"x":false`)
		case 1:
			parts = append(parts, `"nested":{"a":[1,2,{"b":null}]}`) // slow path
		case 2:
			parts = append(parts, `"esc":"tab\tquote\""`) // slow path
		}
		rng.Shuffle(len(parts), func(a, c int) { parts[a], parts[c] = parts[c], parts[a] })
		sep := ","
		if rng.IntN(10) == 0 {
			sep = " , "
		}
		line := "{" + strings.Join(parts, sep) + "}"
		if rng.IntN(15) == 0 {
			line = " " + line + " \r"
		}
		b.WriteString(line + "\n")
		if (from == 0 || ts >= from) && (to == 0 || ts <= to) {
			kept++
			for k, v := range vals {
				want[k] = append(want[k], v)
			}
		}
		switch rng.IntN(40) {
		case 0:
			b.WriteString(line[:len(line)/2] + "\n") // truncated
			malformed++
		case 1:
			fmt.Fprintf(&b, "{\"ts_us\":%d,\"schedule_us\":5}\n", ts) // no step_duration_us
			malformed++
		case 2:
			fmt.Fprintf(&b, "{\"ts_us\":%d,\"step_duration_us\":\"12\"}\n", ts) // string
			malformed++
		case 3:
			b.WriteString("not json at all\n")
			malformed++
		case 4:
			b.WriteString("\n   \n")
		}
	}
	return b.Bytes(), want, kept, malformed
}

func TestSummarizeStepsAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name     string
		n        int
		from, to int64
	}{
		{"whole", 5000, 0, 0},
		{"window", 5000, 1_780_000_000_200_000, 1_780_000_000_600_000},
		{"from only", 3000, 1_780_000_000_300_000, 0},
		{"to only", 3000, 0, 1_780_000_000_100_000},
		{"one step", 1, 0, 0},
		{"empty window", 100, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, want, kept, malformed := genLog(rng, tc.n, tc.from, tc.to)
			var cp bytes.Buffer
			st, err := SummarizeSteps(context.Background(), bytes.NewReader(log), tc.from, tc.to, &cp)
			if err != nil {
				t.Fatal(err)
			}
			if st.NSteps != int64(kept) || st.Malformed != int64(malformed) {
				t.Fatalf("n_steps %d malformed %d, want %d and %d (first: %s)", st.NSteps, st.Malformed, kept, malformed, st.FirstMalformed)
			}
			for _, name := range TimerNames {
				xs := want[name]
				got, ok := st.Timers[name]
				if len(xs) == 0 {
					if ok {
						t.Errorf("%s: present with no values", name)
					}
					continue
				}
				checkQuantiles(t, name, got, refQuantiles(xs), 1e-12)
			}
			// The copy holds exactly the kept lines, and re-summarizes the same.
			if got := bytes.Count(cp.Bytes(), []byte("\n")); got != kept {
				t.Fatalf("copy has %d lines, want %d", got, kept)
			}
			st2, err := SummarizeSteps(context.Background(), &cp, 0, 0, nil)
			if err != nil || st2.NSteps != st.NSteps || st2.Malformed != 0 {
				t.Fatalf("re-summary of copy: %+v %v", st2, err)
			}
			for k, q := range st.Timers {
				if st2.Timers[k] != q {
					t.Errorf("copy %s: %+v != %+v", k, st2.Timers[k], q)
				}
			}
		})
	}
}

func TestSummarizeStepsEdgeLines(t *testing.T) {
	log := strings.Join([]string{
		`{"ts_us":10,"step_duration_us":5,"build_meta_us":0}`, // measured zero is kept
		`{"ts_us":11,"step_duration_us":7,"build_meta_us":null}`,
		`{"ts_us":12.9,"step_duration_us":1e1}`,               // float ts floors to 12
		`{"ts_us":13,"step_duration_us":3,"ts_us":14}`,        // last duplicate wins
		`{"ts_u\u0073":15,"step_duration_us":4}`,              // escaped key (slow path)
		`{"ts_us":16,"step_duration_us":01}`,                  // invalid JSON number
		`[1,2]`,                                               // not an object
		`null`,                                                // not an object
		`{"ts_us":17,"step_duration_us":2} trailing`,          // trailing garbage
		`{"ts_us":18,"step_duration_us":2,"execute_us":true}`, // bool in a timer
		`{"ts_us":19,"step_duration_us":6}`,                   // last line without newline
	}, "\n")
	st, err := SummarizeSteps(context.Background(), strings.NewReader(log), 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.NSteps != 6 || st.Malformed != 5 {
		t.Fatalf("n_steps %d malformed %d (first %q), want 6 and 5", st.NSteps, st.Malformed, st.FirstMalformed)
	}
	if !strings.HasPrefix(st.FirstMalformed, "line 6:") {
		t.Errorf("first malformed %q, want line 6", st.FirstMalformed)
	}
	checkQuantiles(t, "step", st.Timers["step_duration_us"], refQuantiles([]float64{5, 7, 10, 3, 4, 6}), 1e-12)
	if q := st.Timers["build_meta_us"]; q.N != 1 || q.Max != 0 {
		t.Errorf("build_meta: %+v, want one measured zero", q)
	}
	if st.FirstTsUs != 10 || st.LastTsUs != 19 {
		t.Errorf("ts range %d..%d", st.FirstTsUs, st.LastTsUs)
	}
	// Window bounds are inclusive; 12.9 floors to 12.
	st, _ = SummarizeSteps(context.Background(), strings.NewReader(log), 12, 14, nil)
	if st.NSteps != 2 {
		t.Errorf("window [12,14]: %d steps, want 2", st.NSteps)
	}
}

func TestSummarizeStepsLongLine(t *testing.T) {
	long := `{"ts_us":1,"step_duration_us":9,"pad":"` + strings.Repeat("x", 3*readBufSize) + `"}`
	log := long + "\n" + `{"ts_us":2,"step_duration_us":11}` + "\n"
	st, err := SummarizeSteps(context.Background(), strings.NewReader(log), 0, 0, nil)
	if err != nil || st.NSteps != 2 || st.Malformed != 0 {
		t.Fatalf("%+v %v", st, err)
	}
}

func TestSummarizeStepsCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := newRepeatReader(genBlock(100), 100, 1_000_000)
	if _, err := SummarizeSteps(ctx, r, 0, 0, nil); err == nil {
		t.Fatal("want context error")
	}
}

// Many distinct non-integer values force binning: the percentiles must stay
// within the documented relative error of 2^-11.
// Negative values (binned in the map), integers (dense, exact) and
// non-negative fractions (binned in pages) are mixed, over several seeds.
func TestSummarizeStepsBinnedError(t *testing.T) {
	for seed := uint64(0); seed < 4; seed++ {
		testBinnedError(t, seed)
	}
}

func testBinnedError(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(3, seed))
	var b bytes.Buffer
	var xs []float64
	for i := 0; i < 3*tailCap; i++ {
		v := math.Exp(2+8*rng.Float64()) + 0.5*rng.Float64()
		switch rng.IntN(8) {
		case 0:
			v = -v
		case 1:
			v = math.Floor(v)
		}
		xs = append(xs, v)
		fmt.Fprintf(&b, `{"ts_us":%d,"step_duration_us":%s}`+"\n", i+1, strconv.FormatFloat(v, 'g', -1, 64))
	}
	st, err := SummarizeSteps(context.Background(), &b, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := st.Timers["step_duration_us"]
	if !q.Approx {
		t.Fatal("want Approx after binning")
	}
	checkQuantiles(t, "binned", q, refQuantiles(xs), 1.0/2048)
}

// fmtByte picks plain or exponent notation for a value.
func fmtByte(rng *rand.Rand) byte {
	if rng.IntN(5) == 0 {
		return 'g'
	}
	return 'f'
}

func TestParseDigits(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20000; i++ {
		n := 1 + rng.IntN(18)
		digits := make([]byte, n)
		for k := range digits {
			digits[k] = byte('0' + rng.IntN(10))
		}
		tails := []string{"", ",", "}", " ", ".5", "e3", "\xff", "x12345678"}
		in := append(append([]byte("xx"), digits...), tails[rng.IntN(len(tails))]...)
		want, _ := strconv.ParseInt(string(digits), 10, 64)
		got, end := parseDigits(in, 2)
		if got != want || end != 2+n {
			t.Fatalf("%q: got %d end %d, want %d end %d", in, got, end, want, 2+n)
		}
	}
}

// TestParserPathsAgree parses a realistic log whose lines mostly share one
// shape, with mutations, through one long-lived parser (template, fast
// path, key-order guesses and their relearning) and checks every line
// against encoding/json.
func TestParserPathsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	lines := bytes.Split(bytes.TrimSpace(genBlock(3000)), []byte("\n"))
	lines = append(lines, bytes.Split(bytes.TrimSpace(genBlockFrac(3000)), []byte("\n"))...)
	// frac replaces the value of key (keeping the key set, so the template
	// path sees it) by tok.
	frac := func(key, tok string) func([]byte) []byte {
		re := regexp.MustCompile(`"` + key + `":[^,}]*`)
		return func(l []byte) []byte { return re.ReplaceAll(l, []byte(`"`+key+`":`+tok)) }
	}
	mutations := []func([]byte) []byte{
		// Fractions the template must reject or convert exactly.
		frac("update_us", "3104.5620000000003"), // 17 significant digits
		frac("update_us", "123456789012.345"),   // 15: exact fast path
		frac("update_us", "1234567890123.456"),  // 16: strconv
		frac("update_us", ".5"),
		frac("update_us", "5."),
		frac("update_us", "01.5"),
		frac("update_us", "0.000001"),
		frac("update_us", "2.5E3"),
		frac("ts_us", "7.5"),
		frac("ts_us", "7.0"),
		func(l []byte) []byte { return bytes.Replace(l, []byte(`"pid":31337`), []byte(`"pid":-1`), 1) },
		func(l []byte) []byte {
			return bytes.Replace(l, []byte(`,"schedule_us":`), []byte(`, "schedule_us" : `), 1)
		},
		func(l []byte) []byte { return bytes.Replace(l, []byte(`"update_us":`), []byte(`"update_us":0`), 1) }, // leading zero
		func(l []byte) []byte {
			return bytes.Replace(l, []byte(`"update_us":`), []byte(`"update_us":1.5e1,"x":`), 1)
		},
		func(l []byte) []byte { return bytes.Replace(l, []byte(`"execute_us":`), []byte(`"execute_uz":`), 1) },
		func(l []byte) []byte {
			return bytes.Replace(l, []byte(`,"get_finished_us"`), []byte(`,"extra":"s","get_finished_us"`), 1)
		},
		func(l []byte) []byte { return l[:len(l)-1] },                           // truncated
		func(l []byte) []byte { return append(l[:len(l):len(l)], ' ') },         // trailing space
		func(l []byte) []byte { return append(l[:len(l)-1:len(l)-1], ",}"...) }, // trailing comma
		func(l []byte) []byte {
			return bytes.Replace(l, []byte(`"num_running":`), []byte(`"num_running":null,"n":`), 1)
		},
		func(l []byte) []byte {
			return bytes.Replace(l, []byte(`"step_duration_us":`), []byte(`"step_duration_us":99999999999999999999,"s":`), 1)
		},
		func(l []byte) []byte { i := bytes.LastIndexByte(l, ','); return append(l[:i:i], '}') }, // last key gone
		// Keys left out or added, as the plugin's optional fields are: the
		// template widens and must still agree.
		dropKey("schedule_us"), dropKey("update_us"), dropKey("ts_us"), dropKey("step_duration_us"),
		func(l []byte) []byte { return bytes.Replace(l, []byte(`,"pid":`), []byte(`,"wait_us":12.5,"pid":`), 1) },
		func(l []byte) []byte {
			return bytes.Replace(l, []byte(`,"pid":`), []byte(`,"batch_queue":1,"pid":`), 1)
		},
		func(l []byte) []byte {
			return bytes.Replace(l, []byte(`{"ts_us":`), []byte(`{"gpu_us":3.25,"ts_us":`), 1)
		},
		func(l []byte) []byte { // two keys swapped: an order the template contradicts
			return bytes.Replace(l, []byte(`{"ts_us":`), []byte(`{"pid":1,"ts_us":`), 1)
		},
		func(l []byte) []byte {
			return bytes.Replace(l, []byte(`,"pid":31337`), []byte(`,"pid":31337,"pid":2`), 1)
		}, // duplicate
	}
	sp := stepParser{}
	templated := 0
	for n, l := range lines {
		if rng.IntN(3) == 0 {
			l = mutations[rng.IntN(len(mutations))](l)
		}
		var got, want, scratch StepRecord
		var ts bool
		if sp.scanTemplate(l, &scratch, &ts) {
			templated++
		}
		gotErr := sp.parse(l, &got)
		wantErr := ParseStepLine(l, &want) // no template, no guesses
		if (gotErr == nil) != (wantErr == nil) || (gotErr == nil && got != want) {
			t.Fatalf("line %d %q:\n parser %+v %v\n fresh  %+v %v", n, l, got, gotErr, want, wantErr)
		}
	}
	if templated < len(lines)/2 {
		t.Errorf("template path taken for %d of %d lines; want most", templated, len(lines))
	}
}

// dropKey removes key (and its value) from a line.
func dropKey(key string) func([]byte) []byte {
	re := regexp.MustCompile(`"` + key + `":[^,}]*,?`)
	return func(l []byte) []byte {
		out := re.ReplaceAll(l, nil)
		return bytes.Replace(out, []byte(",}"), []byte("}"), 1)
	}
}

// A short line whose last key is long still takes the template path.
func TestTemplateShortTail(t *testing.T) {
	sp := stepParser{}
	var rec StepRecord
	var ts bool
	line := []byte(`{"ts_us":1,"step_duration_us":2,"num_decode_tokens":4}`)
	if err := sp.parse(line, &rec); err != nil {
		t.Fatal(err)
	}
	if !sp.scanTemplate(line, &rec, &ts) || rec.Values[FieldNumDecodeTokens] != 4 || rec.TsUs != 1 {
		t.Fatalf("template missed: %+v", rec)
	}
}

// Batch-queue lines (async scheduling) carry launch_us and wait_us instead
// of execute_us, and batch_queue:1; SummarizeSteps counts them.
func TestSummarizeStepsBatchQueue(t *testing.T) {
	log := `{"ts_us":10,"step_duration_us":600.5,"schedule_us":100.25,"launch_us":150.0,"wait_us":300.125,"update_us":40.0,"unaccounted_us":10.125,"batch_queue":1,"pid":7}
{"ts_us":20,"step_duration_us":300.5,"schedule_us":100.25,"launch_us":150.0,"unaccounted_us":50.25,"batch_queue":1,"pid":7}
{"ts_us":30,"step_duration_us":900.0,"schedule_us":100.0,"execute_us":700.0,"update_us":50.0,"unaccounted_us":50.0,"pid":7}
`
	st, err := SummarizeSteps(context.Background(), strings.NewReader(log), 0, 0, nil)
	if err != nil || st.NSteps != 3 || st.Malformed != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	if st.BatchQueueSteps != 2 {
		t.Errorf("batch-queue steps %d, want 2", st.BatchQueueSteps)
	}
	if q := st.Timers["wait_us"]; q.N != 1 || q.Max != 300.125 {
		t.Errorf("wait_us %+v", q)
	}
	if q := st.Timers["launch_us"]; q.N != 2 || q.Min != 150 {
		t.Errorf("launch_us %+v", q)
	}
	if q := st.Timers["execute_us"]; q.N != 1 {
		t.Errorf("execute_us %+v", q)
	}
}

// Lines of both paths, wait_us on some, through one parser: after the
// template has widened to hold every key (optional ones marked), nearly
// every line takes the template path and agrees with a fresh parse.
func TestTemplateOptionalKeys(t *testing.T) {
	data, _ := io.ReadAll(newFreshLogReader(3, 5000, -1))
	sp := stepParser{}
	templated := 0
	for n, l := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var got, want, scratch StepRecord
		var ts bool
		if sp.scanTemplate(l, &scratch, &ts) {
			templated++
			if err := ParseStepLine(l, &want); err != nil || scratch.TsUs != want.TsUs {
				t.Fatalf("line %d: template accepted %q: %+v vs %+v %v", n, l, scratch, want, err)
			}
		}
		gotErr := sp.parse(l, &got)
		wantErr := ParseStepLine(l, &want)
		if gotErr != nil || wantErr != nil || got != want {
			t.Fatalf("line %d %q:\n parser %+v %v\n fresh  %+v %v", n, l, got, gotErr, want, wantErr)
		}
	}
	if templated < 4900 {
		t.Errorf("template path for %d of 5000 lines; want ≥ 4900", templated)
	}
}

// Status lines are kept whatever the window and say which hooks are
// missing and whether GPU time is measured; GPU lines (gpu_us of a batch
// written after its step) count into gpu_us on the path before them; per
// path timers split the steps; the all-paths timers are the union.
func TestSummarizeStepsStatusGPUAndPaths(t *testing.T) {
	log := `{"ts_us":5,"status":"engine","pid":7,"plugin":"0.2.0","vllm":"0.18.1","path":"batch_queue","gpu_time":"measured","gpu_hook":"cuda events around GPUModelRunner._model_forward","gpu_sample_every":16,"incomplete":[{"hook":"Scheduler.update_from_output","reason":"not a patchable method"}]}
{"ts_us":10,"step_duration_us":600.5,"schedule_us":100.25,"launch_us":150.0,"wait_us":300.125,"update_us":40.0,"unaccounted_us":10.125,"gpu_us":250.5,"batch":1,"batch_queue":1,"pid":7}
{"ts_us":20,"step_duration_us":300.5,"schedule_us":100.25,"launch_us":150.0,"unaccounted_us":50.25,"batch_queue":1,"pid":7}
{"ts_us":25,"gpu_us":251.5,"gpu_batch":2,"pid":7}
{"ts_us":30,"step_duration_us":900.0,"schedule_us":100.0,"execute_us":700.0,"update_us":50.0,"unaccounted_us":50.0,"gpu_us":600.0,"batch":3,"pid":8}
{"ts_us":40,"gpu_batch":3,"pid":8}
{"ts_us":50,"status":"engine","pid":8,"gpu_time":"not_measured","gpu_reason":"torch is not importable"}
{"ts_us":55,"status":"other","pid":9}
`
	var cp bytes.Buffer
	st, err := SummarizeSteps(context.Background(), strings.NewReader(log), 10, 30, &cp)
	if err != nil {
		t.Fatal(err)
	}
	if st.NSteps != 3 || st.Malformed != 2 {
		t.Fatalf("n_steps %d malformed %d (%s), want 3 and 2", st.NSteps, st.Malformed, st.FirstMalformed)
	}
	if len(st.Engines) != 2 || st.Engines[0].VLLM != "0.18.1" || st.Engines[1].GPUReason != "torch is not importable" {
		t.Errorf("engines %+v", st.Engines)
	}
	if want := []string{"Scheduler.update_from_output: not a patchable method"}; fmt.Sprint(st.Incomplete) != fmt.Sprint(want) {
		t.Errorf("incomplete %q, want %q", st.Incomplete, want)
	}
	g := st.GPU
	if !g.Measured || g.Steps != 2 || g.Late != 1 || !strings.Contains(g.Source, "_model_forward") || g.SampleEvery != 16 {
		t.Errorf("gpu %+v (want sample_every 16 from the measuring engine's status)", g)
	}
	bq, step := st.Paths[StepPathBatchQueue], st.Paths[StepPathStep]
	if bq.NSteps != 2 || step.NSteps != 1 {
		t.Fatalf("paths %+v", st.Paths)
	}
	checkQuantiles(t, "bq gpu", bq.Timers["gpu_us"], refQuantiles([]float64{250.5, 251.5}), 1e-12)
	checkQuantiles(t, "step gpu", step.Timers["gpu_us"], refQuantiles([]float64{600}), 1e-12)
	checkQuantiles(t, "all gpu", st.Timers["gpu_us"], refQuantiles([]float64{250.5, 251.5, 600}), 1e-12)
	checkQuantiles(t, "all schedule", st.Timers["schedule_us"], refQuantiles([]float64{100.25, 100.25, 100}), 1e-12)
	if _, ok := bq.Timers["execute_us"]; ok {
		t.Error("execute_us on the batch-queue path")
	}
	// The copy keeps both status lines (outside the window too), the steps
	// and the GPU line in the window.
	if got := strings.Count(cp.String(), "\n"); got != 6 {
		t.Errorf("copy has %d lines, want 6:\n%s", got, cp.String())
	}
}

// A log without gpu_us and without status lines says GPU time was not
// measured, with the reason; a status line's reason wins.
func TestSummarizeStepsGPUNotMeasured(t *testing.T) {
	st, _ := SummarizeSteps(context.Background(), strings.NewReader(`{"ts_us":1,"step_duration_us":5,"wait_us":3,"batch_queue":1}`), 0, 0, nil)
	if st.GPU.Measured || st.GPU.Reason != NoGPUReason {
		t.Errorf("%+v", st.GPU)
	}
	st, _ = SummarizeSteps(context.Background(), strings.NewReader(`{"ts_us":1,"status":"engine","pid":1,"gpu_time":"not_measured","gpu_reason":"CUDA is not available"}`+"\n"+`{"ts_us":1,"step_duration_us":5}`), 0, 0, nil)
	if st.GPU.Measured || st.GPU.Reason != "CUDA is not available" {
		t.Errorf("%+v", st.GPU)
	}
}

// mergedQuantiles over several counters equals the reference over the
// union, for values of every tier (dense, ns, table, binned).
func TestMergedQuantiles(t *testing.T) {
	for seed := uint64(0); seed < 5; seed++ {
		rng := rand.New(rand.NewPCG(seed, 77))
		var cs [3]counter
		var all []float64
		for i := 0; i < 20000; i++ {
			var v float64
			switch rng.IntN(4) {
			case 0:
				v = float64(rng.IntN(5000))
			case 1:
				v = float64(rng.IntN(60000)) / 1000
			case 2:
				v = math.Round(rng.Float64()*1e6) / 1000
			default:
				v = -rng.Float64() * 100
			}
			cs[rng.IntN(3)].add(v)
			all = append(all, v)
		}
		got := mergedQuantiles([]*counter{&cs[0], &cs[1], &cs[2]})
		checkQuantiles(t, fmt.Sprint("seed ", seed), got, refQuantiles(all), 1e-12)
	}
}

// The sample log the plugin wrote (vllm/tests/test_log_contract.py keeps
// its keys in step with the plugin): async scheduling on vLLM main's
// transcription, CPU-bound, GPU time measured. Summarized, it says the GPU
// time was measured on every collecting step of the batch-queue path, with
// the engine's status, and no missing hook; gpu_us is far below the step.
func TestPluginSampleLog(t *testing.T) {
	f, err := os.Open("testdata/plugin_batch_queue.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := SummarizeSteps(context.Background(), f, 0, 0, nil)
	if err != nil || st.Malformed != 0 || st.NSteps != 12 {
		t.Fatalf("%+v %v", st, err)
	}
	bq, ok := st.Paths[StepPathBatchQueue]
	if !ok || bq.NSteps != 12 || len(st.Paths) != 1 {
		t.Fatalf("paths %+v", st.Paths)
	}
	g := bq.Timers["gpu_us"]
	if !st.GPU.Measured || g.N != st.GPU.Steps || g.N < 10 || !strings.Contains(st.GPU.Source, "_model_forward") {
		t.Errorf("gpu %+v, timer %+v", st.GPU, g)
	}
	if g.P50 > bq.Timers["step_duration_us"].P50/4 || len(st.Incomplete) != 0 || len(st.Engines) != 1 {
		t.Errorf("gpu p50 %v step p50 %v incomplete %v engines %+v", g.P50, bq.Timers["step_duration_us"].P50, st.Incomplete, st.Engines)
	}
	for _, k := range []string{"schedule_us", "build_meta_us", "launch_us", "wait_us", "update_us", "get_finished_us"} {
		if _, ok := bq.Timers[k]; !ok {
			t.Errorf("%s absent", k)
		}
	}
}
