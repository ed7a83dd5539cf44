package main

// Issue 22's load generator features end to end on the simulated engine:
// the chat endpoint, closed-loop concurrency, dataset prompts and ramp-up,
// through `mbench load` and through sweeps.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop"
)

// loadRecords runs `mbench load` with args against base and returns its
// records, every one of which must have completed.
func loadRecords(t *testing.T, base string, args ...string) []openloop.Record {
	t.Helper()
	out := filepath.Join(t.TempDir(), "load")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all := append([]string{"load", "--url", base, "--out", out}, args...)
	stdout, stderr, err := runCLI(t, ctx, all...)
	if err := ranToEnd(t, err, out); err != nil {
		t.Fatalf("mbench %v: %v\nstdout:\n%s\nstderr:\n%s", all, err, stdout, stderr)
	}
	data, err := os.ReadFile(filepath.Join(out, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := openloop.ReadRecords(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if !r.OK() {
			t.Fatalf("request %d: %s", r.ID, r.Error)
		}
	}
	return recs
}

// tokenCounts maps request id to its input and output tokens.
func tokenCounts(recs []openloop.Record) map[int][2]int {
	out := map[int][2]int{}
	for _, r := range recs {
		out[r.ID] = [2]int{r.InputTokens, r.OutputTokens}
	}
	return out
}

// TestLoadChatEndpointSameTokens: the same seeded `mbench load` over
// /v1/completions and /v1/chat/completions of the sim gives every request
// the same input and output tokens (the chat prompt is the same ids as
// words, which the sim counts one token each; the counts come from usage).
func TestLoadChatEndpointSameTokens(t *testing.T) {
	t.Parallel()
	base := serveSimInProcess(t, fastSim(4096))
	args := []string{"--rate", "40", "--requests", "30", "--seed", "5", "--model", "sim-model", "--input", "64", "--output", "6"}
	comp := loadRecords(t, base, append(args, "--endpoint", "completions")...)
	chat := loadRecords(t, base, append(args, "--endpoint", "chat")...)
	if len(comp) != 30 || len(chat) != 30 {
		t.Fatalf("%d and %d records, want 30", len(comp), len(chat))
	}
	a, b := tokenCounts(comp), tokenCounts(chat)
	for id, c := range a {
		if b[id] != c || c != [2]int{64, 6} {
			t.Errorf("request %d: completions %v, chat %v, want [64 6]", id, c, b[id])
		}
	}
	for _, r := range chat {
		// 6 gaps: the role chunk carries choices (vLLM's chat client's
		// first token), then 6 content chunks.
		if r.UsageMissing || len(r.ITLMs) != 6 || r.TTFT() <= 0 || r.E2EL() < r.TTFT() {
			t.Errorf("chat record %+v", r)
		}
	}
}

// lgSweepHead and lgSweepTail frame the test sweeps of this file: a sim
// engine and one block without the GPU gate.
const (
	lgSweepHead = `name: loadgen-test
seed: 3
engine:
  kind: sim
  port: %PORT%
  ready_timeout: 20s
  grace: 2s
`
	lgSweepTail = `repeat: {min: 1, max: 1}
gate: {enabled: false}
`
)

const chatSweep = lgSweepHead + `  sim: {step_base_us: 400, prefill_token_us: 0.1, decode_seq_us: 5}
configs: {plain: {}}
endpoint: chat
rates: [20]
shapes:
  - {input: 48, output: 5}
measure: {warmup_requests: 2, min_completed: 30, timeout: 30s, drain_timeout: 5s}
` + lgSweepTail

// TestChatSweep: endpoint: chat through a sweep; the summary's token totals
// are the shape's (from the chat usage chunks) and every request streamed
// its tokens.
func TestChatSweep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep")
	}
	runs := runWorkloadSweep(t, chatSweep, 1)
	r := runs[0]
	completed := r.summary["completed"].(float64)
	if completed < 30 || r.summary["total_input_tokens"].(float64) != 48*completed || r.summary["total_output_tokens"].(float64) != 5*completed {
		t.Errorf("summary: completed %v, input %v, output %v; want 48 and 5 tokens each", completed, r.summary["total_input_tokens"], r.summary["total_output_tokens"])
	}
	for _, rec := range r.recs {
		if rec.OutputTokens != 5 || rec.InputTokens != 48 || len(rec.ITLMs) != 5 { // the role chunk, then 5 content chunks
			t.Errorf("record %+v", rec)
		}
	}
}

// inflight is openloop.Concurrency between the n-th and the last measured
// send.
func inflight(recs []openloop.Record, n int) (peak int, mean float64) {
	// Over the measured phase: it starts once the warm-up has finished,
	// and the level is held from its n-th send.
	var sends []int64
	for _, r := range recs {
		if r.Phase == openloop.PhaseMeasure {
			sends = append(sends, r.SentNs)
		}
	}
	sort.Slice(sends, func(i, j int) bool { return sends[i] < sends[j] })
	return openloop.Concurrency(recs, sends[n-1], sends[len(sends)-1])
}

// checkClosedLoop holds a closed-loop run at level to its definition: no
// send before a slot freed (the k-th send after the (k-level)-th
// completion), the level reached and never exceeded. How promptly a freed
// slot gets its next send (the mean in flight against the level) is the
// machine's as much as the generator's: a timing claim, logged here and
// measured by `mbench bench-load`.
func checkClosedLoop(t *testing.T, where string, recs []openloop.Record, level int) {
	t.Helper()
	var sends, dones []int64
	for _, r := range recs {
		sends, dones = append(sends, r.SentNs), append(dones, r.DoneNs)
	}
	slices.Sort(sends)
	slices.Sort(dones)
	for k := level; k < len(sends); k++ {
		if sends[k] < dones[k-level] {
			t.Errorf("%s: send %d at %d ns before the completion that frees its slot (%d ns): more than %d in flight", where, k, sends[k], dones[k-level], level)
			break
		}
	}
	peak, mean := inflight(recs, level)
	t.Logf("%s: level %d: peak %d, mean in flight %.3f", where, level, peak, mean)
	if peak != level || mean > float64(level) {
		t.Errorf("%s: in flight: peak %d mean %.3f, want level %d", where, peak, mean, level)
	}
}

// TestLoadConcurrency: `mbench load --concurrency 5` against the sim keeps
// 5 requests in flight (checkClosedLoop, from requests.jsonl), completes
// every request asked for, and sends each promptly after its slot freed.
func TestLoadConcurrency(t *testing.T) {
	t.Parallel()
	base := serveSimInProcess(t, fastSim(4096))
	recs := loadRecords(t, base, "--concurrency", "5", "--requests", "60", "--warmup", "5", "--model", "sim-model", "--input", "64", "--output", "8")
	if len(recs) != 65 {
		t.Fatalf("%d records, want 65", len(recs))
	}
	checkClosedLoop(t, "load", recs, 5)
	for _, r := range recs {
		if r.SentNs < r.ScheduledNs {
			t.Errorf("request %d sent before its slot freed: %+v", r.ID, r)
		}
	}
	if _, _, err := runCLI(t, context.Background(), "load", "--url", base, "--concurrency", "2", "--rate", "3", "--requests", "1",
		"--input", "1", "--output", "1", "--out", t.TempDir()); err == nil {
		t.Error("--rate with --concurrency accepted")
	}
}

const concurrencySweep = lgSweepHead + `  sim: {step_base_us: 1500, prefill_token_us: 0.1, decode_seq_us: 5}
configs: {plain: {}}
arrival: {process: concurrency, in_flight: [2, 6]}
shapes:
  - {input: 64, output: 24}
measure: {warmup_requests: 6, min_completed: 40, timeout: 30s, drain_timeout: 5s}
` + lgSweepTail

// TestConcurrencySweep: arrival {process: concurrency, in_flight: [2, 6]}
// runs one cell per level, each holding its level in flight.
func TestConcurrencySweep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep")
	}
	runs := runWorkloadSweep(t, concurrencySweep, 2)
	for _, r := range runs {
		level := int(r.summary["rate"].(float64))
		if r.summary["arrival"] != "concurrency" {
			t.Errorf("run %s: arrival %v", r.key, r.summary["arrival"])
		}
		checkClosedLoop(t, "run "+r.key, r.recs, level)
		if c := r.summary["completed"].(float64); c < 40 {
			t.Errorf("run %s: completed %v, want ≥ min_completed 40", r.key, c)
		}
	}
}

// datasetTruth reads a JSONL prompt file independently of openloop: the
// (words, output_tokens) pair of each line, the sim's token counts.
func datasetTruth(t *testing.T, path string) map[[2]int]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]int]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var v struct {
			Prompt string `json:"prompt"`
			Output int    `json:"output_tokens"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		out[[2]int{len(strings.Fields(v.Prompt)), v.Output}] = true
	}
	return out
}

// writeDataset writes a JSONL prompt file of n prompts of distinct lengths
// (i+3 words, 2+i%5 output tokens).
func writeDataset(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		words := make([]string, i+3)
		for k := range words {
			words[k] = fmt.Sprintf("w%d", (i*7+k)%23)
		}
		fmt.Fprintf(&b, "{\"prompt\": %q, \"output_tokens\": %d}\n", strings.Join(words, " "), 2+i%5)
	}
	p := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadDataset: `mbench load --dataset` sends prompts from the file: every
// request's token counts (from the sim's usage) are those of one of its
// lines; the same seed draws the same prompts, another seed others; over
// both endpoints.
func TestLoadDataset(t *testing.T) {
	t.Parallel()
	base := serveSimInProcess(t, fastSim(4096))
	path := writeDataset(t, 12)
	truth := datasetTruth(t, path)
	run := func(seed, endpoint string) map[int][2]int {
		recs := loadRecords(t, base, "--rate", "50", "--requests", "25", "--seed", seed, "--model", "sim-model", "--dataset", path, "--endpoint", endpoint)
		for _, r := range recs {
			if !truth[[2]int{r.InputTokens, r.OutputTokens}] {
				t.Errorf("%s seed %s: request %d has %d input and %d output tokens, no line of the file has", endpoint, seed, r.ID, r.InputTokens, r.OutputTokens)
			}
		}
		return tokenCounts(recs)
	}
	a, b, c := run("1", "completions"), run("1", "chat"), run("2", "completions")
	if !reflect.DeepEqual(a, b) {
		t.Errorf("seed 1: completions and chat drew different prompts")
	}
	if reflect.DeepEqual(a, c) {
		t.Errorf("seeds 1 and 2 drew the same prompts")
	}
}

// TestDatasetSweep: a dataset shape with an output override through a
// sweep; a malformed dataset is refused at validation with its file:line.
func TestDatasetSweep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep")
	}
	path := writeDataset(t, 9)
	truth := map[int]bool{}
	for k := range datasetTruth(t, path) {
		truth[k[0]] = true
	}
	runs := runWorkloadSweep(t, lgSweepHead+`  sim: {step_base_us: 400, prefill_token_us: 0.1, decode_seq_us: 5}
configs: {plain: {}}
rates: [30]
shapes:
  - {name: prompts, output: 7, dataset: {path: `+path+`, format: jsonl}}
measure: {warmup_requests: 2, min_completed: 30, timeout: 30s, drain_timeout: 5s}
`+lgSweepTail, 1)
	for _, r := range runs[0].recs {
		if !truth[r.InputTokens] || r.OutputTokens != 7 {
			t.Errorf("record %d: %d input tokens (not a line's), %d output (want the override 7)", r.ID, r.InputTokens, r.OutputTokens)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"prompt\": \"a\"}\n{\"prompt\": 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := writeMatrix(t, t.TempDir(), strings.Replace(chatSweep, "  - {input: 48, output: 5}", "  - {output: 3, dataset: {path: "+bad+", format: jsonl}}", 1))
	_, stderr, err := runCLI(t, context.Background(), "validate", m)
	if err == nil || !strings.Contains(err.Error()+stderr, bad+":2: prompt: want string") {
		t.Errorf("validate of a bad dataset: %v\n%s", err, stderr)
	}
}

// rampSplit counts a run's ramp-phase and measured requests and checks that
// every ramp request was scheduled before every measured one, within the
// ramp's duration of the first.
func rampSplit(t *testing.T, recs []openloop.Record, d time.Duration) (ramp, measured, rampMeasured int) {
	t.Helper()
	first, lastRamp, firstMeasured := int64(1<<62), int64(0), int64(1<<62)
	for _, r := range recs {
		first = min(first, r.ScheduledNs)
	}
	for _, r := range recs {
		if r.Ramp != (r.ScheduledNs-first < int64(d)) {
			t.Errorf("request %d scheduled %v into the run: ramp %t", r.ID, time.Duration(r.ScheduledNs-first), r.Ramp)
		}
		switch r.Phase {
		case openloop.PhaseRamp:
			ramp++
			lastRamp = max(lastRamp, r.ScheduledNs)
		case openloop.PhaseMeasure:
			measured++
			firstMeasured = min(firstMeasured, r.ScheduledNs)
			if r.Ramp {
				rampMeasured++
			}
		}
	}
	if ramp > 0 && lastRamp >= firstMeasured {
		t.Errorf("a ramp request was scheduled after a measured one")
	}
	return ramp, measured, rampMeasured
}

// TestLoadRamp: `mbench load --ramp linear` sends the ramp's requests as
// phase ramp, outside the measured count; --include-ramp measures them.
func TestLoadRamp(t *testing.T) {
	t.Parallel()
	base := serveSimInProcess(t, fastSim(4096))
	args := []string{"--rate", "60", "--ramp", "linear", "--ramp-from", "10", "--ramp-duration", "500ms", "--requests", "40", "--model", "sim-model", "--input", "32", "--output", "4"}
	ramp, measured, _ := rampSplit(t, loadRecords(t, base, args...), 500*time.Millisecond)
	// Λ(0.5 s) = (10 + 60)/2 · 0.5 = 17.5 expected ramp arrivals (plus the one at 0).
	if measured != 40 || ramp < 5 || ramp > 35 {
		t.Errorf("%d ramp and %d measured requests, want about 18.5 and 40", ramp, measured)
	}
	ramp, measured, rampMeasured := rampSplit(t, loadRecords(t, base, append(args, "--include-ramp")...), 500*time.Millisecond)
	if ramp != 0 || measured != 40 || rampMeasured < 5 {
		t.Errorf("--include-ramp: %d ramp-phase, %d measured of which %d in the ramp", ramp, measured, rampMeasured)
	}
}

// TestRampSweep: arrival.ramp through a sweep: ramp requests recorded,
// excluded from the summary's counts.
func TestRampSweep(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end sweep")
	}
	runs := runWorkloadSweep(t, strings.Replace(chatSweep, "endpoint: chat\n", "arrival: {ramp: {kind: exponential, from: 4, duration: 1s}}\n", 1), 1)
	r := runs[0]
	ramp, measured, _ := rampSplit(t, r.recs, time.Second)
	if ramp < 3 || int(r.summary["num_prompts"].(float64)) != measured {
		t.Errorf("%d ramp requests; summary num_prompts %v, measured %d", ramp, r.summary["num_prompts"], measured)
	}
}
