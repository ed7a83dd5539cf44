package simengine

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDecodeCompletionRequest(t *testing.T) {
	for _, tc := range []struct {
		body string
		want completionRequest
	}{
		{`{"prompt":[5,6,7]}`, completionRequest{Prompt: []int64{5, 6, 7}, MaxTokens: 16}},
		{`{"prompt":[[5,6]],"max_tokens":null,"model":null}`, completionRequest{Prompt: []int64{5, 6}, MaxTokens: 16}},
		{`{"prompt":["a b"],"model":"m","max_tokens":9,"min_tokens":9,"ignore_eos":true,"stream":true,` +
			`"stream_options":{"include_usage":true},"temperature":0,"n":1,"extra":{"x":[1]}}`,
			completionRequest{Model: "m", Prompt: tokenize("a b"), MaxTokens: 9, MinTokens: 9, IgnoreEOS: true, Stream: true, IncludeUsage: true}},
		{` {"prompt":"x","stream":true,"stream_options":{}} `, completionRequest{Prompt: tokenize("x"), MaxTokens: 16, Stream: true}},
	} {
		got, err := decodeCompletionRequest([]byte(tc.body))
		if err != nil {
			t.Errorf("%s: %v", tc.body, err)
			continue
		}
		if got.Model != tc.want.Model || got.MaxTokens != tc.want.MaxTokens || got.MinTokens != tc.want.MinTokens ||
			got.IgnoreEOS != tc.want.IgnoreEOS || got.Stream != tc.want.Stream || got.IncludeUsage != tc.want.IncludeUsage ||
			len(got.Prompt) != len(tc.want.Prompt) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.body, got, tc.want)
		}
		for i := range got.Prompt {
			if got.Prompt[i] != tc.want.Prompt[i] {
				t.Errorf("%s: prompt %v, want %v", tc.body, got.Prompt, tc.want.Prompt)
				break
			}
		}
	}
}

func TestTokenizeOneTokenPerWord(t *testing.T) {
	a, b := tokenize(" hello  world\n hello "), tokenize("hello")
	if len(a) != 3 || a[0] != a[2] || a[0] == a[1] || b[0] != a[0] {
		t.Errorf("tokenize: %v, %v", a, b)
	}
	if len(tokenize("  \t ")) != 0 {
		t.Errorf("whitespace has tokens")
	}
}

func FuzzDecodeCompletionRequest(f *testing.F) {
	for _, s := range []string{
		`{"prompt":[1,2,3],"max_tokens":4,"min_tokens":4,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":"hello world","model":"sim-model"}`,
		`{"prompt":[["a"]]}`, `{"prompt":[[1,2]]}`, `{"prompt":[]}`, `{"prompt":null}`, `{"prompt":[1e3]}`,
		`{"prompt":[9223372036854775807]}`, `{"prompt":"a","max_tokens":-1}`, `{"prompt":"a"}x`, `[]`, `null`, ``,
		`{"prompt":"\u0000\ud800"}`, `{"prompt":[1],"n":2}`, `{"prompt":[1],"stream_options":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeCompletionRequest(body)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != 400 || ae.msg == "" {
				t.Fatalf("error %v is not a 400 apiError", err)
			}
			return
		}
		if len(req.Prompt) == 0 || req.MaxTokens < 1 || req.MinTokens < 0 || req.MinTokens > req.MaxTokens {
			t.Fatalf("accepted an invalid request %+v from %q", req, body)
		}
		for _, id := range req.Prompt {
			if id < 0 || id > maxTokenID {
				t.Fatalf("token id %d out of range from %q", id, body)
			}
		}
		if req.IncludeUsage && !req.Stream {
			t.Fatalf("include_usage without stream from %q", body)
		}
	})
}

// The handler works without Serve: the loop starts with the first request.
func TestHandlerWithoutServe(t *testing.T) {
	e, err := New(Config{StepBaseUs: 100, Jitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	defer e.Close()
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a b c","max_tokens":3,"ignore_eos":true}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Mbench-Simulated") != "true" {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// While the engine is busy, logged steps reach the file (the flush rule
// itself, every stepFlushEvery, is TestStepLogFlushEvery's); none is lost at
// shutdown.
func TestStepLogFlushedWhileBusy(t *testing.T) {
	te := startEngine(t, Config{StepBaseUs: 1000, Jitter: -1})
	go te.postErr(`{"prompt":[1],"max_tokens":100000,"ignore_eos":true,"stream":true}`)
	n := 0
	deadline := time.Now().Add(time.Minute) // a hang guard
	for n < 10 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		n = len(readSteps(t, te.stepLog))
	}
	if n < 10 {
		t.Fatalf("%d steps on disk after a minute of a busy engine", n)
	}
	if te.metrics(t)["vllm:num_requests_running"] != 1 {
		t.Errorf("the request ended before its steps reached the disk: want them written while it runs")
	}
	te.stop()
	if all := len(readSteps(t, te.stepLog)); all < n {
		t.Errorf("lines lost at shutdown: %d then %d", n, all)
	}
}

// TestStepLogFlushEvery: buffered lines are flushed before a sleep that
// would leave them unwritten stepFlushEvery or more after the last flush,
// and not before.
func TestStepLogFlushEvery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "steps.jsonl")
	l, err := openStepLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	onDisk := func() int { return len(readSteps(t, path)) }
	if err := l.write(stepRecord{endWall: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := l.flushBefore(l.lastFlush.Add(stepFlushEvery - time.Microsecond)); err != nil || onDisk() != 0 {
		t.Fatalf("flushed %d lines (%v) before a sleep ending within %v of the last flush", onDisk(), err, stepFlushEvery)
	}
	if err := l.flushBefore(l.lastFlush.Add(stepFlushEvery)); err != nil || onDisk() != 1 {
		t.Fatalf("%d lines on disk (%v) before a sleep ending %v after the last flush, want 1", onDisk(), err, stepFlushEvery)
	}
}
