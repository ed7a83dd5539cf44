package llamacpp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/longrun"
	"github.com/mbench/mbench/llamacpp"
)

// TestTokenIDsAgainstLlamaServer serves a model with a 20,000-token
// vocabulary (every request got HTTP 400 "Prompt contains invalid tokens"
// when the ids were fixed to [1000, 31000)):
//   - mbench load learns the vocabulary from /v1/models and draws ids from
//     [1000, 20000): no request fails;
//   - --token-ids 1000:31000 is refused at first contact (exit 2, the
//     vocabulary named), before any request reaches the engine;
//   - with --model given (no lookup, the vocabulary unknown) and ids up to
//     20,100, the prompts holding an id past the vocabulary fail with the
//     engine's HTTP 400 and the rest complete: the run's verdict is errors,
//     said as failed requests, and the failures count neither as requests
//     the engine left incomplete nor as load it could not carry.
func TestTokenIDsAgainstLlamaServer(t *testing.T) {
	// Beside the package's other waiting tests in a plain run (each its
	// own server and model path); serial in CI's long run.
	longrun.Parallel(t)
	bin := findServer(t)
	m := llamacpp.TinyModel
	m.Vocab = 20000
	srv := startServer(t, bin, writeModel(t, m), "--parallel", "4", "-c", "8192", "-t", "1")
	ctx := context.Background()
	base := []string{"load", "--url", srv.URL, "--rate", "10", "--input", "64", "--output", "8", "--requests", "60", "--seed", "5"}

	dir := t.TempDir()
	code, out := mbench(t, ctx, append(base, "--out", dir)...)
	if code != 0 && code != 3 || !strings.Contains(out, "prompt token ids [1000, 20000) (engine)") {
		t.Fatalf("learned vocabulary: exit %d:\n%s", code, out)
	}
	if f := failures(readRecords(t, dir)); f != "" {
		t.Errorf("ids learned from the vocabulary: %s", f)
	}

	logBefore, _ := os.ReadFile(srv.LogPath)
	dir = t.TempDir()
	code, out = mbench(t, ctx, append(base, "--token-ids", "1000:31000", "--out", dir)...)
	logAfter, _ := os.ReadFile(srv.LogPath)
	if code != 2 || !strings.Contains(out, "has 20000 tokens (ids 0-19999); set token ids below 20000") {
		t.Errorf("--token-ids 1000:31000 against 20000 tokens: exit %d, want 2 naming the vocabulary:\n%s", code, out)
	}
	if n := len(parseTimings(logAfter[len(logBefore):])); n != 0 {
		t.Errorf("the engine served %d requests of a run refused at first contact", n)
	}

	dir = t.TempDir()
	code, out = mbench(t, ctx, append(base, "--model", "tiny", "--token-ids", "1000:20100", "--max-failed", "0.01", "--out", dir)...)
	if code != 3 {
		t.Errorf("partial failures: exit %d, want 3 (not a result):\n%s", code, out)
	}
	recs := readRecords(t, dir)
	var failed, ok int
	for _, r := range recs {
		switch {
		case r.OK():
			ok++
		case r.HTTPStatus == 400 && strings.Contains(r.Error, "invalid tokens") && r.ErrorClass == "http_4xx":
			failed++
		default:
			t.Errorf("request %d failed otherwise than with the engine's 400: %s %d %s", r.ID, r.ErrorClass, r.HTTPStatus, r.Error)
		}
	}
	// A 64-id prompt from [1000, 20100) holds no id ≥ 20000 with
	// probability (19000/19100)^64 = 0.715: about 17 of 60 fail.
	if failed < 5 || ok < 25 {
		t.Fatalf("%d failed and %d completed of %d; want a partial failure", failed, ok, len(recs))
	}
	var s struct {
		Completed, Failed int
		Verdict           string
		Reasons           []string `json:"verdict_reasons"`
		ThrRatio          *float64 `json:"thr_ratio"`
		Errors            map[string]int
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary_A.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	t.Logf("partial failures: %d of %d failed (HTTP 400); verdict %s: %q; thr_ratio %v", failed, len(recs), s.Verdict, s.Reasons, deref(s.ThrRatio))
	if s.Failed != failed || s.Completed != ok || s.Errors["http_4xx"] != failed {
		t.Errorf("summary: %d completed, %d failed, errors %v; the records say %d and %d", s.Completed, s.Failed, s.Errors, ok, failed)
	}
	if s.Verdict != "errors" {
		t.Errorf("verdict %s, want errors", s.Verdict)
	}
	for _, r := range s.Reasons {
		if strings.Contains(r, "incomplete") || strings.Contains(r, "timeout") || strings.Contains(r, "saturated") || strings.Contains(r, "fewer requests than were offered") {
			t.Errorf("the engine's 400s are called %q", r)
		}
	}
	if !strings.Contains(strings.Join(s.Reasons, "; "), "failed") {
		t.Errorf("verdict reasons %q do not say that requests failed", s.Reasons)
	}
	if s.ThrRatio != nil && *s.ThrRatio < 0.9 {
		t.Errorf("thr_ratio %.3f: the failed requests counted as load the engine could not carry", *s.ThrRatio)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
