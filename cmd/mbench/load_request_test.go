package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/hangguard"
	"github.com/mbench/mbench/openloop/stub"
)

// TestLoadRequestOptions: mbench load sends the API key read from the
// environment (a stub that, like vllm serve --api-key, refuses requests
// without it), the headers, sampling parameters, extra body fields and
// natural lengths; the key reaches no file and no output; a cap keeps the
// requests in flight at it; an infinite rate needs a request count.
func TestLoadRequestOptions(t *testing.T) {
	const key = "sk-planted-in-env-1234"
	s, err := stub.Start(stub.Options{APIKey: key, RecordRequests: true, FirstToken: 10 * time.Millisecond, Gap: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Setenv("MBENCH_TEST_API_KEY", key)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	load := func(extra ...string) (string, string, string, error) {
		out := filepath.Join(t.TempDir(), "load")
		args := append([]string{"load", "--url", s.URL, "--input", "8", "--output", "6", "--format", "json", "--out", out}, extra...)
		stdout, stderr, err := runCLI(t, ctx, args...)
		return out, stdout, stderr, err
	}

	out, stdout, stderr, err := load("--rate", "100", "--requests", "12", "--api-key-env", "MBENCH_TEST_API_KEY",
		"--percentiles", "50,99.9", "--label", "lab", "--metadata", "tp=2",
		"--header", "X-Tenant=team-a", "--header", "X-Trace: t1", "--temperature", "0.6", "--top-k", "8",
		"--extra-body", `{"chat_template_kwargs":{"enable_thinking":false}}`, "--ignore-eos=false", "--served-model-name", "stub-model")
	if err != nil && exitStatus(err) != exitNoResult { // the verdict is not what this test is about
		t.Fatalf("load: %v\n%s", err, stderr)
	}
	var sum map[string]any
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatal(err)
	}
	pc, _ := sum["percentiles"].(map[string]any)
	if sum["p95_ttft_ms"] == nil || pc["p99.9_ttft_ms"] == nil || sum["label"] != "lab" || sum["metadata"].(map[string]any)["tp"] != "2" ||
		sum["natural_length"] != true || sum["output_lengths"] == nil {
		t.Errorf("summary lacks p95, p99.9, the label, the metadata or the output lengths:\n%s", stdout)
	}
	es := s.Entries()
	if len(es) != 12 {
		t.Fatalf("%d requests reached the stub, want 12", len(es))
	}
	for _, e := range es {
		var body map[string]any
		if err := json.Unmarshal([]byte(e.Body), &body); err != nil {
			t.Fatal(err)
		}
		if e.Header.Get("Authorization") != "Bearer "+key || e.Header.Get("X-Tenant") != "team-a" || e.Header.Get("X-Trace") != "t1" ||
			body["temperature"] != 0.6 || body["top_k"] != float64(8) || body["chat_template_kwargs"] == nil ||
			body["ignore_eos"] != nil || body["min_tokens"] != nil || body["model"] != "stub-model" {
			t.Errorf("request %s: headers %v body %s", e.ID, e.Header, e.Body)
		}
	}
	for _, o := range []string{stdout, stderr} {
		if strings.Contains(o, key) {
			t.Errorf("the key is in the command's output:\n%s", o)
		}
	}
	_ = filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), key) {
				t.Errorf("%s contains the API key", p)
			}
		}
		return err
	})

	// The control: without the key the stub refuses (the checks above
	// could fail), and the key never shows in the error either.
	if _, _, stderr, err := load("--rate", "100", "--requests", "2"); exitStatus(err) != exitNoResult || !strings.Contains(err.Error(), "401") {
		t.Errorf("no key: %v (exit %d), want the model lookup refused with 401\n%s", err, exitStatus(err), stderr)
	}
	if _, _, _, err := load("--rate", "100", "--requests", "2", "--api-key-env", "MBENCH_TEST_UNSET_VAR"); exitStatus(err) != exitUsage {
		t.Errorf("--api-key-env naming an unset variable: %v, want a usage error", err)
	}

	s.Reset()
	if _, _, stderr, err := load("--rate", "500", "--max-concurrency", "2", "--requests", "30", "--api-key-env", "MBENCH_TEST_API_KEY"); err != nil && exitStatus(err) != exitNoResult {
		t.Fatalf("capped load: %v\n%s", err, stderr)
	}
	if got := s.MaxInflight(); got != 2 {
		t.Errorf("--max-concurrency 2: the stub saw %d in flight at most", got)
	}
	if _, stdout, stderr, err := load("--rate", "inf", "--requests", "10", "--api-key-env", "MBENCH_TEST_API_KEY"); err != nil && exitStatus(err) != exitNoResult {
		t.Errorf("--rate inf --requests 10: %v\n%s", err, stderr)
	} else if !strings.Contains(stdout, `"arrival": "burst"`) {
		t.Errorf("a burst's summary does not say so:\n%.300s", stdout)
	}
	for _, bad := range [][]string{{"--rate", "inf", "--duration", "1s"}, {"--concurrency", "2", "--max-concurrency", "2", "--requests", "2"},
		{"--rate", "10", "--requests", "2", "--header", "Content-Length=3"}, {"--rate", "10", "--requests", "2", "--extra-body", `{"max_tokens":3}`},
		{"--rate", "10", "--requests", "2", "--model", "a", "--served-model-name", "b"}, {"--rate", "10", "--requests", "2", "--top-p", "0"}} {
		if _, _, _, err := load(bad...); exitStatus(err) != exitUsage {
			t.Errorf("load %v: %v, want a usage error", bad, err)
		}
	}
}

// TestSweepRequestOptions: a sim sweep whose engine, like vllm serve
// --api-key, refuses requests without the key gets it from the environment
// variable the matrix names (request.api_key_env) — with natural lengths
// (the sim's outputs end before max_tokens), a sampling parameter, a header
// and a concurrency cap — and no file of the sweep holds the key. Without
// api_key_env the same engine fails every request with 401: the check
// above could fail.
func TestSweepRequestOptions(t *testing.T) {
	if testing.Short() {
		t.Skip("sim sweep")
	}
	const key = "sk-planted-sweep-key-5678"
	t.Setenv("MBENCH_SWEEP_KEY", key)
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	dir := t.TempDir()
	body := strings.NewReplacer("%ENV%", "  env: {VLLM_API_KEY: "+key+"}\n", "%CONFIGS%", "  plain: {}", "%RATES%", "20", "%BLOCKS%", "1",
		"%NAME%", "req", "%PORT%", "%PORT%", "output: 8}", "output: 32}").Replace(simMatrix)
	m := writeMatrix(t, dir, body+"request: {api_key_env: MBENCH_SWEEP_KEY, ignore_eos: false, sampling: {temperature: 0.5}, headers: {X-Tenant: a}}\narrival: {max_in_flight: 4}\n")
	out := filepath.Join(dir, "out")
	if _, stderr, err := runSweepCLI(t, ctx, "run", m, "--out", out, "--quiet"); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr)
	}
	recs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "*", "requests.jsonl"))
	if len(recs) == 0 {
		t.Fatal("no requests.jsonl")
	}
	short, ok := 0, 0
	for _, r := range readJSONL(t, recs[0]) {
		if r["phase"] != "measure" {
			continue
		}
		if r["status"] == "ok" {
			ok++
		}
		if n, _ := r["output_tokens"].(float64); n < 32 {
			short++
		}
	}
	if ok < 20 || short == 0 {
		t.Errorf("%d measured requests ok, %d shorter than max_tokens: want the key accepted and natural lengths", ok, short)
	}
	// The report draws the journaled run: a client_limited run is run again
	// in place, so other attempts' summaries lie beside it.
	var sum struct{ Verdict string }
	journal := readJSONL(t, filepath.Join(out, "journal.jsonl"))
	if len(journal) != 1 {
		t.Fatalf("journal has %d lines, want the one run", len(journal))
	}
	readJSONFile(t, filepath.Join(out, journal[0]["dir"].(string), "summary_A.json"), &sum)
	// report.md says the lengths were natural whatever timing graded the
	// run, and draws the cell's row exactly when the run is usable (ok).
	rep, _ := os.ReadFile(filepath.Join(out, "report.md"))
	natural := strings.Contains(string(rep), "## Output lengths (natural: the engine ended each output)\n") ||
		strings.Contains(string(rep), "**Output lengths**: natural: the engine ended each output")
	if !natural || strings.Contains(string(rep), "Output lengths**: fixed") {
		t.Fatalf("report.md does not say the output lengths were natural:\n%s", rep)
	}
	lengths, _, _ := strings.Cut(string(rep)[strings.Index(string(rep), "Output lengths"):], "\n## ")
	if row := strings.Contains(lengths, "| plain | 64x8 | 20 |"); row != (sum.Verdict == "ok") {
		t.Errorf("run verdict %s; report.md's output-length row drawn: %v\n%s", sum.Verdict, row, lengths)
	}
	_ = filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), key) {
				t.Errorf("%s contains the API key", p)
			}
		}
		return err
	})

	m2 := writeMatrix(t, t.TempDir(), body)
	out2 := filepath.Join(dir, "out2")
	_, _, err := runCLI(t, ctx, "run", m2, "--out", out2, "--quiet")
	if exitStatus(err) != exitNoResult {
		t.Fatalf("without api_key_env: %v, want no result (every request refused)", err)
	}
	recs2, _ := filepath.Glob(filepath.Join(out2, "runs", "*", "*", "requests.jsonl"))
	if len(recs2) == 0 {
		return // the run failed before its requests: still no result
	}
	// Every request the engine answered got its 401; the rest were still
	// in flight when the fail limit aborted the run (class canceled).
	refused := 0
	for _, r := range readJSONL(t, recs2[0]) {
		switch {
		case r["http_status"] == float64(401):
			refused++
		case r["error_class"] == "canceled" && r["http_status"] == nil:
		default:
			t.Errorf("without the key a request got %v, want 401 (or canceled by the abort): %v", r["http_status"], r)
		}
	}
	if refused == 0 {
		t.Errorf("without the key no request was refused with 401")
	}
}

// TestBurstSweep: a matrix with arrival process burst (an infinite rate)
// sends each run's min_completed requests at once, here capped at 8 in
// flight, records its arrival as burst, and the matrix's metadata is in the
// report; a burst with rates, warmup or a capacity search is refused.
func TestBurstSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("sim sweep")
	}
	ctx, cancel := hangguard.Context(t)
	defer cancel()
	dir := t.TempDir()
	const body = "name: burst\nseed: 3\nengine:\n  kind: sim\n  port: %PORT%\n  ready_timeout: 20s\n  grace: 2s\n  sim: {step_base_us: 1000}\n" +
		"configs: {plain: {}}\nshapes: [{name: 64x8, input: 64, output: 8}]\nmeasure: {min_completed: 30, timeout: 20s, drain_timeout: 5s}\n" +
		"repeat: {min: 1, max: 1}\ngate: {enabled: false}\nmetadata: {tp: \"1\", note: burst demo}\n"
	m := writeMatrix(t, dir, body+"arrival: {process: burst, max_in_flight: 8}\n")
	out := filepath.Join(dir, "out")
	if _, stderr, err := runSweepCLI(t, ctx, "run", m, "--out", out, "--quiet"); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr)
	}
	recs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "*", "requests.jsonl"))
	sums, _ := filepath.Glob(filepath.Join(out, "runs", "*", "*", "summary_A.json"))
	if len(recs) != 1 || len(sums) != 1 {
		t.Fatalf("%d requests.jsonl, %d summaries, want one run", len(recs), len(sums))
	}
	var sum struct{ Arrival string }
	readJSONFile(t, sums[0], &sum)
	if sum.Arrival != "burst" {
		t.Errorf("arrival %q, want burst", sum.Arrival)
	}
	var sched []float64
	n := 0
	for _, r := range readJSONL(t, recs[0]) {
		if r["phase"] == "measure" {
			n++
			sched = append(sched, r["scheduled_ns"].(float64))
		}
	}
	for _, x := range sched {
		if x != sched[0] {
			t.Fatalf("scheduled times differ (%v, %v): a burst schedules every request at once", sched[0], x)
		}
	}
	if n != 30 {
		t.Errorf("%d measured requests, want min_completed 30", n)
	}
	rep, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(rep), "| metadata: note | burst demo |") {
		t.Error("report.md lacks the matrix's metadata")
	}
	for _, c := range []struct{ bad, want string }{
		{"arrival: {process: burst}\nrates: [1]\n", "rates: a burst has no rate"},
		{"arrival: {process: burst}\nmeasure: {min_completed: 30, warmup_requests: 2}\n", "measure.warmup_requests: a burst's warmup requests would go out with its measured ones"},
		{"arrival: {process: burst}\ncapacity: {metric: ttft_p90, max_ms: 50, lo: 1, hi: 8}\n", "capacity: a capacity search needs a rate or a closed loop to vary"},
	} {
		b := strings.Replace(body, "measure: {min_completed: 30, timeout: 20s, drain_timeout: 5s}\n", "", 1)
		if !strings.Contains(c.bad, "measure:") {
			b += "measure: {min_completed: 30}\n"
		}
		_, stderr, err := runCLI(t, ctx, "validate", writeMatrix(t, t.TempDir(), b+c.bad))
		if exitStatus(err) != exitUsage || !strings.Contains(err.Error()+stderr, c.want) {
			t.Errorf("%q: %v, want refused with %q\n%s", c.bad, err, c.want, stderr)
		}
	}
}
