package simengine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// testEngine is an engine served on 127.0.0.1:0 for one test.
type testEngine struct {
	e       *Engine
	url     string
	stepLog string
	stop    func() // cancel Serve and wait for it (idempotent)
	// expectCrash accepts a *CrashError from Serve (an injected crash).
	expectCrash bool
}

// fastCfg is a quick, noiseless config: 300 µs steps, no jitter.
func fastCfg() Config {
	return Config{StepBaseUs: 300, PrefillTokenUs: -1, DecodeSeqUs: -1, Jitter: -1}
}

func startEngine(t testing.TB, cfg Config) *testEngine {
	t.Helper()
	if cfg.StepLog == "" {
		cfg.StepLog = filepath.Join(t.TempDir(), "engine_step.jsonl")
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.stderr = io.Discard
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ln) }()
	stopped := false
	te := &testEngine{e: e, url: "http://" + ln.Addr().String(), stepLog: cfg.StepLog}
	te.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			var ce *CrashError
			if err != nil && !(te.expectCrash && errors.As(err, &ce)) {
				t.Errorf("Serve: %v", err)
			}
			if te.expectCrash && ce == nil {
				t.Errorf("Serve returned %v after a crash, want a *CrashError", err)
			}
		case <-time.After(time.Minute): // a hang's bound
			t.Errorf("Serve did not return within a minute of cancel")
		}
	}
	t.Cleanup(te.stop)
	return te
}

// post sends a /v1/completions body and returns status and whole body.
func (te *testEngine) post(t testing.TB, body string) (int, string) {
	t.Helper()
	status, out, err := te.postErr(body)
	if err != nil {
		t.Fatal(err)
	}
	return status, out
}

// postErr is post for goroutines other than the test's.
func (te *testEngine) postErr(body string) (int, string, error) {
	resp, err := http.Post(te.url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, "", fmt.Errorf("POST: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, string(b), fmt.Errorf("reading body: %w", err)
	}
	return resp.StatusCode, string(b), nil
}

// metrics scrapes /metrics, checks it parses as Prometheus text, and returns
// each sample summed per metric name.
func (te *testEngine) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(te.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				out[name] += m.Counter.GetValue()
			case m.Gauge != nil:
				out[name] += m.Gauge.GetValue()
			case m.Untyped != nil:
				out[name] += m.Untyped.GetValue()
			}
		}
	}
	return out
}

// steps stops the engine (flushing its log) and returns the logged steps.
func (te *testEngine) steps(t *testing.T) []map[string]float64 {
	t.Helper()
	te.stop()
	return readSteps(t, te.stepLog)
}

func readSteps(t *testing.T, path string) []map[string]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]float64
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		var m map[string]float64
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s:%d: %v: %s", path, line, err, sc.Text())
		}
		out = append(out, m)
	}
	return out
}

func idsPrompt(n, offset int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, offset+i)
	}
	b.WriteByte(']')
	return b.String()
}

// sseEvents splits a body into its "data: " payloads, failing on any framing
// other than vLLM's "data: <payload>\n\n".
func sseEvents(t *testing.T, body string) []string {
	t.Helper()
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("SSE body does not end with a blank line: %q", tail(body))
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		p, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(p, "\n") {
			t.Fatalf("bad SSE event %q", ev)
		}
		out = append(out, p)
	}
	return out
}

func tail(s string) string {
	if len(s) > 200 {
		return s[len(s)-200:]
	}
	return s
}

// streamTimes streams a completion and returns each data payload with the
// time it arrived, relative to the send.
func streamTimes(t testing.TB, url, body string) ([]string, []time.Duration) {
	t.Helper()
	t0 := time.Now()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var payloads []string
	var at []time.Duration
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := bytes.CutPrefix(bytes.TrimRight(line, "\n"), []byte("data: ")); ok {
			payloads = append(payloads, string(p))
			at = append(at, time.Since(t0))
		}
	}
	return payloads, at
}

func errNotExist() error { return os.ErrNotExist }
