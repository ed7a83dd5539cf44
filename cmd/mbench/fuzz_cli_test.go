package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// fuzzLoadFlags are the mbench load flags FuzzLoadFlags gives hostile
// values: every flag but those that say where the load goes (--url, --host,
// --port, --endpoint, --base-url) or where files are written (--out,
// --result-dir, …), which the fuzzer must not point elsewhere. --trace and
// --dataset name a file holding the fuzzed bytes.
var fuzzLoadFlags = []string{"backend", "model", "served-model-name", "token-ids", "header", "api-key-env", "extra-body",
	"ignore-eos", "temperature", "top-p", "top-k", "min-p", "presence-penalty", "frequency-penalty", "repetition-penalty",
	"request-id-prefix", "dataset-name", "input", "output", "random-range-ratio", "random-prefix-len",
	"prefix-repetition-prefix-len", "prefix-repetition-suffix-len", "prefix-repetition-num-prefixes",
	"prefix-repetition-output-len", "dataset", "dataset-format", "sharegpt-output-len", "custom-output-len", "trace",
	"time-scale", "request-limit", "max-inflight-sessions", "rate", "concurrency", "max-concurrency", "arrival",
	"burstiness", "ramp", "ramp-from", "ramp-up-end-rps", "ramp-duration", "include-ramp", "ready-check-timeout-sec",
	"requests", "duration", "min-completed", "warmup", "seed", "timeout", "drain-timeout", "request-timeout",
	"percentiles", "percentile-metrics", "slo", "max-failed", "label", "metadata", "format", "disable-tqdm", "sweep-rates"}

// fuzzRun runs mbench with args for at most a few seconds and fails on a
// panic (run's, recovered here, or a goroutine's, which kills the test
// binary); a usage error (exit 2) must name one of names.
func fuzzRun(t *testing.T, args []string, names ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("mbench %q panicked: %v", args, p)
			}
		}()
		err = run(ctx, append([]string{"mbench"}, args...), &out, &errb)
	}()
	if err == nil || exitCode(err) != exitUsage {
		return
	}
	msg := err.Error()
	for _, n := range names {
		if strings.Contains(msg, n) {
			return
		}
	}
	t.Fatalf("mbench %q: usage error %q names none of %q", args, msg, names)
}

// FuzzLoadFlags: mbench load with a hostile value for one of its flags
// (a file's content for --trace and --dataset) never panics, and a refusal
// names the flag (or the file) as typed. The load goes to a stub endpoint
// and is cut off after a few seconds.
func FuzzLoadFlags(f *testing.F) {
	for _, c := range []struct {
		flag  uint8
		value string
	}{
		{uint8(slices.Index(fuzzLoadFlags, "rate")), "1e308"},
		{uint8(slices.Index(fuzzLoadFlags, "concurrency")), "1e12"},
		{uint8(slices.Index(fuzzLoadFlags, "requests")), "-1"},
		{uint8(slices.Index(fuzzLoadFlags, "duration")), "9999999h"},
		{uint8(slices.Index(fuzzLoadFlags, "header")), "X-A: a\r\nB: c"},
		{uint8(slices.Index(fuzzLoadFlags, "extra-body")), `{"model": 1`},
		{uint8(slices.Index(fuzzLoadFlags, "slo")), "ttft:-1ms"},
		{uint8(slices.Index(fuzzLoadFlags, "trace")), `{"timestamp": 0, "input_length": 1e400, "output_length": 1}`},
		{uint8(slices.Index(fuzzLoadFlags, "dataset")), "\x00\xff{"},
		{uint8(slices.Index(fuzzLoadFlags, "input")), "NaN"},
	} {
		f.Add(c.flag, c.value)
	}
	// An endpoint that answers, so that a file is read and a request sent
	// (mbench load checks the endpoint first).
	srv, err := stub.Start(stub.Options{Tokens: 2})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	f.Fuzz(func(t *testing.T, i uint8, value string) {
		name := fuzzLoadFlags[int(i)%len(fuzzLoadFlags)]
		dir := t.TempDir()
		args := []string{"load", "--url", srv.URL, "--model", "stub-model", "--rate", "50", "--requests", "1", "--out", filepath.Join(dir, "out")}
		names := []string{name}
		if name == "trace" || name == "dataset" {
			path := filepath.Join(dir, name+".jsonl")
			if err := os.WriteFile(path, []byte(value), 0o600); err != nil {
				t.Fatal(err)
			}
			value = path
			names = append(names, path)
		} else {
			args = append(args, "--input", "4", "--output", "1")
		}
		// --flag=value: a boolean flag takes its value only so (as a
		// separate argument "-1" would be an argument of its own).
		fuzzRun(t, append(args, "--"+name+"="+value), names...)
	})
}

// fuzzMatrix is a valid matrix whose one shape reads %SHAPE%.
const fuzzMatrix = `name: fuzz
seed: 1
engine: {kind: sim}
configs: {a: {}}
rates: [1]
shapes:
  - %SHAPE%
measure: {min_completed: 1}
`

// FuzzMatrixFiles: a matrix whose shape names a trace or a dataset file
// holding hostile bytes, and mbench validate or run --dry-run given hostile
// flags: no panic, and a refusal names the file or the flag.
func FuzzMatrixFiles(f *testing.F) {
	f.Add(uint8(0), []byte(`{"timestamp": 0, "input_length": 8, "output_length": 2}`), "--offline")
	f.Add(uint8(1), []byte(`{"prompt": "hi", "output_tokens": 1e400}`), "--offline=maybe")
	f.Add(uint8(2), []byte(`[{"conversations": [{"from": "human"}]}]`), "--quiet --force")
	f.Add(uint8(3), []byte("{\"timestamp\": -1}\r\n\x00"), "--keep-going=2 --no-such-flag")
	f.Add(uint8(0), bytes.Repeat([]byte("["), 20000), "--offline --offline")
	f.Fuzz(func(t *testing.T, kind uint8, content []byte, flags string) {
		shapes := []string{"{name: t, trace: {path: f.jsonl}}", "{name: d, output: 2, dataset: {path: f.jsonl, format: jsonl}}",
			"{name: s, dataset: {path: f.jsonl, format: sharegpt}}", "{name: t, trace: {path: f.jsonl, time_scale: 2}}"}
		dir := t.TempDir()
		m := filepath.Join(dir, "m.yaml")
		if err := os.WriteFile(filepath.Join(dir, "f.jsonl"), content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(m, []byte(strings.Replace(fuzzMatrix, "%SHAPE%", shapes[int(kind)%len(shapes)], 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		extra := strings.Fields(flags)
		for _, a := range extra {
			if strings.Contains(a, "out") || strings.Contains(a, "matrix") || !strings.HasPrefix(a, "-") {
				return // where files go, and arguments, are not fuzzed
			}
		}
		names := []string{"f.jsonl"}
		for _, a := range extra {
			n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			names = append(names, n)
		}
		args := append([]string{"validate", "--offline"}, extra...)
		fuzzRun(t, append(args, m), names...)
		args = append([]string{"run", "--dry-run"}, extra...)
		fuzzRun(t, append(args, "--dry-run", "--out", filepath.Join(dir, "out"), m), names...)
	})
}
