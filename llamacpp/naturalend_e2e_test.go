package llamacpp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mbench/mbench/internal/longrun"
	"github.com/mbench/mbench/llamacpp"
	"github.com/mbench/mbench/openloop"
)

// TestNaturalEndsAgainstLlamaServer holds mbench to what llama-server does
// with a model that ends at once (llamacpp.Model.Ends: </s> is always the
// most likely token):
//
//   - with end-of-sequence allowed (--ignore-eos=false) every request is the
//     engine's one-token answer — </s> streamed as a chunk with empty text,
//     then the final chunk (finish_reason stop, usage 1) — and mbench counts
//     each as a completed response with one output token, a TTFT and no
//     TPOT, never empty_stream; the engine's log says one token per task;
//   - with fixed lengths the same model runs to max_tokens (llama-server
//     biases </s> to −∞), and the end is the final chunk: 16 gaps for 16
//     tokens, finish_reason length;
//   - with fixed lengths, outputs the slot's context cuts short (a prompt of
//     1000 tokens, 64 asked for, 1024 per slot: llama-server stops at the
//     context with finish_reason length) make the run short_outputs, with
//     the count and the finish reasons;
//   - a prompt longer than a slot's context is llama-server's 400
//     exceed_context_size_error, classed context_length.
func TestNaturalEndsAgainstLlamaServer(t *testing.T) {
	longrun.Parallel(t)
	bin := findServer(t)
	m := llamacpp.TinyModel
	m.Ends = true
	p := filepath.Join(t.TempDir(), "ends.gguf")
	if err := os.Symlink(writeModel(t, m), p); err != nil {
		t.Fatal(err)
	}
	// 2 slots of 1024 tokens each.
	srv := startServer(t, bin, p, "--parallel", "2", "-c", "2048", "-t", "1")

	var lastDir string
	loadRecs := func(extra ...string) ([]openloop.Record, int, string) {
		t.Helper()
		lastDir = t.TempDir()
		args := append([]string{"load", "--url", srv.URL, "--rate", "4", "--seed", "3", "--warmup", "0", "--out", lastDir}, extra...)
		code, out := mbench(t, context.Background(), args...)
		return readRecords(t, lastDir), code, out
	}

	logBefore, _ := os.ReadFile(srv.LogPath)
	recs, code, out := loadRecs("--input", "64", "--output", "16", "--requests", "12", "--ignore-eos=false")
	if code != 0 && code != 3 { // 3: a verdict other than ok (a busy machine's client_limited); the records are judged here
		t.Fatalf("natural ends: mbench load exit %d:\n%s", code, out)
	}
	if f := failures(recs); f != "" {
		t.Errorf("natural ends: %s", f)
	}
	for _, r := range recs {
		_, ttft := r.TTFTMs()
		_, tpot := r.TPOTMs()
		if r.OK() && (r.OutputTokens != 1 || r.FinishReason != openloop.FinishStop || len(r.ITLMs) != 1 || !ttft || tpot || r.UsageMissing) {
			t.Errorf("natural ends: request %d: %d output tokens, finish %q, %d gaps, TTFT %v, TPOT %v; want the one-token answer: 1 token, stop, 1 gap (</s>'s chunk to the final chunk), a TTFT, no TPOT",
				r.ID, r.OutputTokens, r.FinishReason, len(r.ITLMs), ttft, tpot)
		}
	}
	timings := srv.TimingsAfter(len(logBefore), len(recs))
	if len(timings) != len(recs) {
		t.Errorf("natural ends: the engine logged %d tasks for %d requests", len(timings), len(recs))
	}
	for _, tm := range timings {
		if tm.Evals != 1 {
			t.Errorf("natural ends: the engine's task %d generated %d tokens; the model was made to answer </s> at once", tm.Task, tm.Evals)
		}
	}

	recs, code, out = loadRecs("--input", "64", "--output", "16", "--requests", "8")
	if code != 0 && code != 3 {
		t.Fatalf("fixed lengths: mbench load exit %d:\n%s", code, out)
	}
	if f := failures(recs); f != "" {
		t.Errorf("fixed lengths: %s", f)
	}
	for _, r := range recs {
		if r.OK() && (r.OutputTokens != 16 || r.FinishReason != openloop.FinishLength || len(r.ITLMs) != 16) {
			t.Errorf("fixed lengths: request %d: %d output tokens, finish %q, %d gaps; want 16, length, 16", r.ID, r.OutputTokens, r.FinishReason, len(r.ITLMs))
		}
	}

	recs, code, out = loadRecs("--input", "1000", "--output", "64", "--requests", "4")
	if code != 3 {
		t.Errorf("outputs cut short by the slot's context: mbench load exit %d, want 3 (not a result):\n%s", code, out)
	}
	short := 0
	for _, r := range recs {
		if r.OK() && r.OutputTokens < 64 && r.FinishReason == openloop.FinishLength {
			short++
		}
	}
	b, err := os.ReadFile(filepath.Join(lastDir, "summary_A.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Verdict string         `json:"verdict"`
		Short   int            `json:"short_output_requests"`
		Finish  map[string]int `json:"short_output_finish_reasons"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if short != 4 || sum.Verdict != "short_outputs" || sum.Short != 4 || sum.Finish[openloop.FinishLength] != 4 {
		t.Errorf("outputs cut short by the slot's context: %d records short with finish length; summary verdict %q, short_output_requests %d, finish reasons %v; want 4, short_outputs, 4, 4 length",
			short, sum.Verdict, sum.Short, sum.Finish)
	}

	recs, code, out = loadRecs("--input", "1100", "--output", "4", "--requests", "3")
	if code == 0 {
		t.Errorf("prompts over the slot's context: mbench load exit 0, want a failed run:\n%s", out)
	}
	for _, r := range recs {
		if r.OK() || r.ErrorClass != openloop.ErrClassContextLength || r.HTTPStatus != 400 {
			t.Errorf("prompt over the slot's context: request %d: %s %s HTTP %d (%s); want context_length, 400", r.ID, r.Status, r.ErrorClass, r.HTTPStatus, r.Error)
		}
	}
	if len(recs) != 3 {
		t.Errorf("prompts over the slot's context: %d records, want 3", len(recs))
	}
}
