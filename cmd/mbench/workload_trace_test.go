package main

// Issue 10 trace tooling through the CLI: `mbench trace sample`, and
// malformed traces refused with file:line before any engine launches.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/openloop"
)

func TestWorkloadTraceSample(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := os.ReadFile(syntheticTrace)
	if err != nil {
		t.Fatal(err)
	}
	inLines := strings.Split(strings.TrimSpace(string(in)), "\n")
	sessionOf := func(i int, l traceLine) string { // a line without a session is a session of its own
		if l.Session != "" {
			return l.Session
		}
		return "#" + strconv.Itoa(i)
	}
	sizes, biggest := map[string]int{}, 0
	for i, l := range readTraceLines(t, inLines) {
		sizes[sessionOf(i, l)]++
		biggest = max(biggest, sizes[sessionOf(i, l)])
	}
	dir := t.TempDir()
	sample := func(n int, seed int64) string {
		out := filepath.Join(dir, "s"+strconv.Itoa(n)+"-"+strconv.FormatInt(seed, 10)+".jsonl")
		if _, stderr, err := runCLI(t, ctx, "trace", "sample", "--in", syntheticTrace, "--out", out,
			"--requests", strconv.Itoa(n), "--seed", strconv.FormatInt(seed, 10)); err != nil {
			t.Fatalf("trace sample: %v\n%s", err, stderr)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for _, n := range []int{10, 40, 80} {
		a := sample(n, 7)
		if b := sample(n, 7); a != b {
			t.Errorf("n=%d: the same seed gave two samples", n)
		}
		if c := sample(n, 8); a == c {
			t.Errorf("n=%d: seeds 7 and 8 gave the same sample", n)
		}
		got := strings.Split(strings.TrimSpace(a), "\n")
		// Lines are copied verbatim and in order: got is a subsequence of
		// the input, so a got line's index in the input identifies it.
		count, j := map[string]int{}, 0
		parsed := readTraceLines(t, got)
		for k, l := range got {
			for j < len(inLines) && inLines[j] != l {
				j++
			}
			if j == len(inLines) {
				t.Fatalf("n=%d: sampled line %d is not an input line in order: %s", n, k+1, l)
			}
			count[sessionOf(j, parsed[k])]++
			j++
		}
		for s, c := range count {
			if c != sizes[s] {
				t.Errorf("n=%d: session %s: %d of its %d requests sampled", n, s, c, sizes[s])
			}
		}
		if d := len(got) - n; d > biggest/2 || d < -biggest/2 {
			t.Errorf("n=%d: sampled %d requests, want within ±%d (half the largest session)", n, len(got), biggest/2)
		}
	}
	_, _, err = runCLI(t, ctx, "trace", "sample", "--in", syntheticTrace, "--out", filepath.Join(dir, "x"), "--requests", "0")
	if ec, ok := err.(exitCoder); !ok || ec.ExitCode() != 2 {
		t.Errorf("--requests 0: %v, want a usage error (exit 2)", err)
	}
}

func readTraceLines(t *testing.T, lines []string) []traceLine {
	t.Helper()
	p := filepath.Join(t.TempDir(), "t.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := readTrace(t, p) // sorts by timestamp: the synthetic trace is sorted already
	if len(out) != len(lines) {
		t.Fatalf("%d trace lines parsed of %d", len(out), len(lines))
	}
	return out
}

const badTraceMatrix = `name: bad-trace
seed: 1
engine: {kind: sim, port: %PORT%, ready_timeout: 10s}
configs: {plain: {}}
rates: [1]
shapes:
  - name: agentic
    trace: {path: bad.jsonl, time_scale: 10}
measure: {min_completed: 1}
gate: {enabled: false}
`

// TestWorkloadBadTraceRefusedEarly: a malformed trace line is refused by
// `mbench validate` and by `mbench run` before anything launches, naming the
// matrix line and the trace's file:line — the same line openloop refuses.
func TestWorkloadBadTraceRefusedEarly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, _, err := runCLI(t, ctx, "validate", filepath.Join("..", "..", "matrices", "agentic.yaml")); err != nil || !strings.Contains(out, "agentic") {
		t.Fatalf("the example matrices/agentic.yaml does not validate: %v\n%s", err, out)
	}
	good := `{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2], "session_id": "a", "turn": 1}`
	for _, tc := range []struct{ name, line, field string }{
		{"not json", `{"timestamp": 1,`, "json"},
		{"no input", `{"timestamp": 1, "output_length": 8}`, "input_length"},
		{"string length", `{"timestamp": 1, "input_length": "9", "output_length": 8}`, "input_length"},
		{"negative ts", `{"timestamp": -5, "input_length": 9, "output_length": 8}`, "timestamp"},
		{"too many ids", `{"timestamp": 1, "input_length": 9, "output_length": 8, "hash_ids": [1, 2]}`, "hash_ids"},
		{"repeated turn", `{"timestamp": 1, "input_length": 9, "output_length": 8, "session_id": "a", "turn": 1}`, "turn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			trace := filepath.Join(dir, "bad.jsonl")
			if err := os.WriteFile(trace, []byte(good+"\n"+tc.line+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			want := trace + ":2: " + tc.field + ": "
			if _, err := openloop.LoadTrace(trace); err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("openloop refuses with %v, want prefix %q", err, want)
			}
			m := writeMatrix(t, dir, badTraceMatrix)
			want = m + ":8: shapes[0].trace.path: bad trace: " + want
			var me matrices.Errors
			if _, err := matrices.Load(m); !errors.As(err, &me) || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("matrices.Load: %v\nwant prefix %q", err, want)
			}
			_, _, err := runCLI(t, ctx, "validate", m)
			if ec, ok := err.(exitCoder); !ok || ec.ExitCode() != 2 || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("validate: %v, want exit 2 and prefix %q", err, want)
			}
			out := filepath.Join(dir, "out")
			stdout, stderr, err := runSweepCLI(t, ctx, "run", m, "--out", out, "--quiet")
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("run: %v, want an error naming %q\n%s%s", err, want, stdout, stderr)
			}
			if runs, _ := filepath.Glob(filepath.Join(out, "runs", "*")); len(runs) > 0 || bytes.Contains([]byte(stdout+stderr), []byte("launch")) {
				t.Errorf("run launched something: %v\n%s%s", runs, stdout, stderr)
			}
		})
	}
}

// TestTraceStatsCLI: `mbench trace stats` prints the trace's figures as JSON
// on stdout; a bad --lru is a usage error.
func TestTraceStatsCLI(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stdout, stderr, err := runCLI(t, ctx, "trace", "stats", "--json", "--lru", "4,100000", syntheticTrace)
	if err != nil {
		t.Fatalf("trace stats: %v\n%s", err, stderr)
	}
	var st openloop.TraceStats
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("stdout is not the stats JSON: %v\n%s", err, stdout)
	}
	lines := readTrace(t, syntheticTrace)
	if st.Requests != len(lines) || len(st.LRU) != 2 || st.LRU[1].HitRate != st.IdealHitRate || st.LRU[0].HitRate >= st.IdealHitRate {
		t.Errorf("stats %+v for a %d-line trace", st, len(lines))
	}
	_, _, err = runCLI(t, ctx, "trace", "stats", "--lru", "0", syntheticTrace)
	if ec, ok := err.(exitCoder); !ok || ec.ExitCode() != 2 {
		t.Errorf("--lru 0: %v, want a usage error (exit 2)", err)
	}
}

// TestTraceSampleReportsIdealHitRates: `mbench trace sample` says on stderr
// the infinite-cache hit rate of the trace and of its sample, the figures
// computed here from both files.
func TestTraceSampleReportsIdealHitRates(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A conversation trace without session ids: block 0 everywhere, turns
	// extending their conversation's chain.
	var b strings.Builder
	next := 1
	for c := range 60 {
		chain := "0"
		for turn := range 1 + c%5 {
			for range 2 {
				chain += ", " + strconv.Itoa(next)
				next++
			}
			n := strings.Count(chain, ",") + 1
			fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 8, "hash_ids": [%s]}`+"\n", 1000*c+100*turn, 512*n, chain)
		}
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "big.jsonl"), filepath.Join(dir, "small.jsonl")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runCLI(t, ctx, "trace", "sample", "--in", in, "--out", out, "--requests", "40", "--seed", "3")
	if err != nil || stdout != "" {
		t.Fatalf("trace sample: %v (stdout %q)\n%s", err, stdout, stderr)
	}
	ideal := func(path string) float64 {
		seen := map[int64]bool{}
		hits, total := 0, 0
		for _, l := range readTrace(t, path) {
			k := 0
			for k < len(l.HashIDs) && seen[l.HashIDs[k]] {
				k++
			}
			hits, total = hits+k, total+len(l.HashIDs)
			for _, h := range l.HashIDs {
				seen[h] = true
			}
		}
		return 100 * float64(hits) / float64(total)
	}
	want := fmt.Sprintf("full trace %.2f%%, sample %.2f%%", ideal(in), ideal(out))
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q does not say %q", stderr, want)
	}
}
