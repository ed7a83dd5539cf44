package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/openloop/stub"
)

// TestLoadVLLMCommandLine: a vllm bench serve command line, with vllm bench
// serve replaced by mbench load, runs against an OpenAI-compatible server
// and its --save-result file is read unchanged by a script written for
// vLLM's saved result (testdata/read_vllm_result.py); its figures are the
// ones summary_A.json holds, and summary_A.json keeps its own keys.
func TestLoadVLLMCommandLine(t *testing.T) {
	t.Parallel()
	srv, err := stub.Start(stub.Options{Tokens: 4, FirstToken: 5 * time.Millisecond, Gap: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// As vLLM's docs write it: nargs flags (--goodput, --metadata) with
	// several values after one flag, bool flags without values.
	args := strings.Fields("load --backend vllm --base-url " + srv.URL + " --endpoint /v1/completions --model stub-model" +
		" --dataset-name random --random-input-len 8 --random-output-len 4 --num-prompts 20 --request-rate 50 --burstiness 1" +
		" --max-concurrency 4 --num-warmups 2 --ignore-eos --seed 3 --temperature 0 --percentile-metrics ttft,tpot,itl,e2el" +
		" --metric-percentiles 25,50,99.9 --goodput ttft:1000 tpot:100 --save-result --result-dir " + dir +
		" --result-filename r.json --metadata tp=1 note=x --disable-tqdm --out " + filepath.Join(dir, "load"))
	stdout, stderr, err := runCLI(t, ctx, args...)
	if err := ranToEnd(t, err, filepath.Join(dir, "load")); err != nil {
		t.Fatalf("load: %v\n%s\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"============ Serving Benchmark Result ============", "Successful requests:                     20",
		"Maximum request concurrency:             4", "P99.9 E2EL (ms):", "verdict: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the summary table lacks %q:\n%s", want, stdout)
		}
	}
	out, err := exec.CommandContext(ctx, "python3", "testdata/read_vllm_result.py", filepath.Join(dir, "r.json"), "25,50,99.9", "ttft,tpot,itl,e2el").CombinedOutput()
	if err != nil {
		t.Fatalf("the vLLM reader: %v\n%s", err, out)
	}
	row := strings.Split(strings.TrimSpace(string(out)), ",")
	if got := strings.Join(row[:5], ","); got != "stub-model,50,4,20,0" {
		t.Errorf("model_id, request_rate, max_concurrency, completed, failed = %s, want stub-model,50,4,20,0", got)
	}
	if len(row) != 8+4*3 {
		t.Errorf("the reader found %d columns, want 20: %s", len(row), out)
	}
	var sum map[string]any
	data, err := os.ReadFile(filepath.Join(dir, "load", "summary_A.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &sum); err != nil {
		t.Fatal(err)
	}
	var saved map[string]any
	if data, err = os.ReadFile(filepath.Join(dir, "r.json")); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &saved); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"median_ttft_ms", "p99.9_e2el_ms", "completed", "request_goodput", "max_output_tokens_per_s"} {
		if sum[k] != saved[k] || sum[k] == nil {
			t.Errorf("%s: summary_A.json %v, saved result %v", k, sum[k], saved[k])
		}
	}
	// summary_A.json's own keys stay (a sweep's readers); vLLM's metadata
	// goes to top level in the saved result only.
	for _, k := range []string{"verdict", "rate", "percentiles", "errors", "metadata", "load", "simulated"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary_A.json lost %q", k)
		}
	}
	if saved["tp"] != "1" || saved["note"] != "x" || sum["tp"] != nil {
		t.Errorf("metadata: saved tp=%v note=%v, summary tp=%v; want 1, x and none", saved["tp"], saved["note"], sum["tp"])
	}
	load := sum["load"].(map[string]any)
	if load["base_urls"].([]any)[0] != srv.URL || load["seed"] != 3.0 || load["num_warmups"] != 2.0 || load["endpoint"] != "/v1/completions" ||
		load["sampling"].(map[string]any)["temperature"] != 0.0 || load["max_concurrency"] != 4.0 || load["input_len"] != 8.0 {
		t.Errorf("the load record cannot rerun the run: %v", load)
	}
	if sum["simulated"] != false {
		t.Errorf("simulated = %v against a stub that is no mbench sim", sum["simulated"])
	}
}

// TestLoadFlagErrorsNameTheFlag: a setting the spec refuses (a shape, a
// length distribution, a dataset, the arrival, a stop condition) is named by
// the flag the user typed, vLLM's name or mbench's, exit 2; an unknown
// single-dash flag gets the flag meant; a vLLM flag mbench lacks says what
// to do instead.
func TestLoadFlagErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	base := []string{"load", "--base-url", "http://127.0.0.1:1", "--out", t.TempDir()}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--request-rate", "-2", "--num-prompts", "5"}, "--request-rate -2: must be > 0"},
		{[]string{"--rate", "NaN", "--num-prompts", "5"}, "--rate NaN: must be > 0"},
		{[]string{"--request-rate", "inf", "--duration", "1s"}, "--request-rate +Inf: an infinite rate"},
		{[]string{"--random-input-len", "0"}, "--random-input-len 0: must be in [1,"},
		{[]string{"--input", "0"}, "--input 0: must be in [1,"},
		{[]string{"--num-prompts", "-1"}, "--num-prompts -1: must be ≥ 0"},
		{[]string{"--min-completed", "-3"}, "--min-completed -3: must be ≥ 0"},
		{[]string{"--num-warmups", "-1", "--num-prompts", "5"}, "--num-warmups -1: must be ≥ 0"},
		{[]string{"--concurrency", "0"}, "--concurrency 0: must be ≥ 1"},
		{[]string{"--concurrency", "2", "--max-concurrency", "1"}, "--max-concurrency 1: a closed loop"},
		{[]string{"--request-rate", "5", "--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "0", "--ramp-duration", "10s"}, "--ramp-up-start-rps 0: an exponential ramp starts at a rate > 0"},
		{[]string{"--concurrency", "2", "--ramp", "linear", "--ramp-duration", "5s"}, "--ramp linear: a closed loop has no rate to ramp"},
		{[]string{"--request-rate", "5", "--concurrency", "2"}, "--request-rate 5: a closed loop (concurrency) has no rate"},
		{[]string{"--trace", "t.jsonl", "--concurrency", "2"}, "--concurrency 2: a trace replays its own send times"},
		{[]string{"--top-p", "2"}, "--top-p 2: must be in (0, 1]"},
		{[]string{"--dataset-name", "prefix_repetition", "--prefix-repetition-num-prefixes", "0"}, "load: --prefix-repetition-num-prefixes 0: must be ≥ 1, got 0"},
		{[]string{"--input", "1", "--random-range-ratio", "0.5"}, "load: --random-range-ratio 0.5: uniform: need 1 ≤ min ≤ max, got min 0 max 2"},
		{[]string{"--dataset-path", "p.jsonl", "--dataset-format", "csv"}, `load: --dataset-format csv: "csv" is not sharegpt or jsonl`},
		{[]string{"--num-prompts", "0"}, "load: --num-prompts 0: set min_completed, requests or duration"},
		{[]string{"--drain-timeout", "-1s"}, "load: --drain-timeout -1s: must be ≥ 0"},
		{[]string{"--dataset-name", "sonnet"}, "--dataset-name sonnet is not supported: use random"},
		{[]string{"--backend", "tgi"}, `--backend "tgi" is not supported`},
		{[]string{"--endpoint", "/v1/embeddings"}, `--endpoint "/v1/embeddings": valid: completions or /v1/completions`},
		{[]string{"--profile"}, "--profile (vllm bench serve's) is not supported"},
		{[]string{"--goodput", "ttft=x"}, "--goodput"},
		{[]string{"-base-urll", "http://x"}, "did you mean --base-url?"},
		{[]string{"--num-prompt", "5"}, "did you mean --num-prompts?"},
		{[]string{"--base-url", "u:pw@127.0.0.1:8000"}, `--base-url: "127.0.0.1:8000" has no scheme: give http://HOST:PORT`},
	} {
		_, _, err := runCLI(t, context.Background(), append(append([]string{}, base...), c.args...)...)
		if exitStatus(err) != exitUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (exit %d); want exit 2 saying %q", c.args, err, exitStatus(err), c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "max_error_rate") || strings.Contains(err.Error(), "openloop: config")) {
			t.Errorf("%v: %v speaks the matrix, not the flags", c.args, err)
		}
	}
}

// TestLoadHelpSaysEachDefaultOnce: no flag of mbench load shows a default
// in words beside a zero default ("(not sent) (default: 0)"), nor a zero
// default on a flag that refuses zero.
func TestLoadHelpSaysEachDefaultOnce(t *testing.T) {
	t.Parallel()
	stdout, _, err := runCLI(t, context.Background(), "load", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(stdout, "\n") {
		if strings.Count(line, "(default") > 1 || strings.Contains(line, "unset") ||
			(strings.Contains(line, "(default: 0)") && (strings.Contains(line, "--concurrency") || strings.Contains(line, "--max-concurrency"))) {
			t.Errorf("help line says its default twice or wrongly: %s", line)
		}
	}
}

// TestLoadProfileSweep: --profile sweep runs synchronous, throughput and
// --sweep-rates Poisson rates evenly between their request throughputs,
// each in its own directory, and prints one row per run; vLLM's bare
// --profile is refused with what to do instead.
func TestLoadProfileSweep(t *testing.T) {
	t.Parallel()
	srv, err := stub.Start(stub.Options{Tokens: 4, FirstToken: 20 * time.Millisecond, Gap: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "sweep")
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	stdout, stderr, err := runCLI(t, ctx, "load", "--base-url", srv.URL, "--model", "stub-model", "--random-input-len", "8",
		"--random-output-len", "4", "--num-prompts", "20", "--profile", "sweep", "--sweep-rates", "2", "--disable-tqdm",
		"--format", "json", "--out", out)
	if err != nil && exitStatus(err) != exitNoResult {
		t.Fatalf("sweep: %v\n%s", err, stderr)
	}
	var rows []struct {
		Profile    string  `json:"profile"`
		Out        string  `json:"out"`
		Completed  int     `json:"completed"`
		Throughput float64 `json:"request_throughput"`
		Rate       any     `json:"request_rate"`
	}
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(rows) != 4 || rows[0].Profile != "synchronous" || rows[1].Profile != "throughput" || rows[2].Profile != "poisson" || rows[3].Profile != "poisson" {
		t.Fatalf("rows %+v; want synchronous, throughput, 2 poisson", rows)
	}
	lo, hi := rows[0].Throughput, rows[1].Throughput
	for i, r := range rows[2:] {
		want := lo + (hi-lo)*float64(i+1)/3
		if got, ok := r.Rate.(float64); !ok || got != want {
			t.Errorf("rate %d: %v, want %v (evenly between %v and %v)", i+1, r.Rate, want, lo, hi)
		}
	}
	for _, r := range rows {
		if r.Completed != 20 {
			t.Errorf("%s: %d completed, want 20", r.Profile, r.Completed)
		}
		if _, err := os.Stat(filepath.Join(r.Out, "summary_A.json")); err != nil {
			t.Error(err)
		}
	}
	_, _, err = runCLI(t, ctx, "load", "--base-url", srv.URL, "--profile", "--num-prompts", "1", "--out", t.TempDir())
	if exitStatus(err) != exitUsage || !strings.Contains(err.Error(), "--profile (vllm bench serve's) is not supported") {
		t.Errorf("vLLM's bare --profile: %v", err)
	}
}
