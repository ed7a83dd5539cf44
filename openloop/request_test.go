package openloop

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

func f64(v float64) *float64 { return &v }

// optionsUnderTest sets every request option.
func optionsUnderTest(natural bool) Request {
	k := 20
	return Request{
		Headers:       map[string]string{"x-tenant": "team-a", "X-Trace": "t 1"},
		APIKey:        "sk-planted-key",
		NaturalLength: natural,
		Sampling:      Sampling{Temperature: f64(0.7), TopP: f64(0.9), TopK: &k, MinP: f64(0.05), PresencePenalty: f64(0.5), FrequencyPenalty: f64(-0.5), RepetitionPenalty: f64(1.1)},
		ExtraBody:     map[string]json.RawMessage{"chat_template_kwargs": json.RawMessage(`{ "enable_thinking" : false }`), "seed": json.RawMessage(`7`)},
	}
}

// checkBody decodes one request body and checks it carries exactly the
// options: each field once, sampling as given, the extra fields, and
// min_tokens and ignore_eos only with fixed lengths.
func checkBody(t *testing.T, body string, q Request, output int) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	for k := range m {
		if n := strings.Count(body, `"`+k+`":`); n != 1 && k != "include_usage" {
			t.Errorf("field %s appears %d times in %s", k, n, body)
		}
	}
	want := map[string]any{"max_tokens": float64(output), "stream": true, "temperature": 0.7, "top_p": 0.9, "top_k": float64(20),
		"min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": float64(7)}
	if !q.NaturalLength {
		want["min_tokens"], want["ignore_eos"] = float64(output), true
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (body %s)", k, m[k], v, body)
		}
	}
	if q.NaturalLength && (m["min_tokens"] != nil || m["ignore_eos"] != nil) {
		t.Errorf("natural lengths: the body still fixes the length: %s", body)
	}
	if ctk, _ := m["chat_template_kwargs"].(map[string]any); ctk["enable_thinking"] != false {
		t.Errorf("extra body field chat_template_kwargs = %v", m["chat_template_kwargs"])
	}
	if so, _ := m["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options = %v", m["stream_options"])
	}
}

// TestRequestOptionsOnTheWire: every request (and the model lookup) carries
// the headers and the API key, and every body the sampling parameters, the
// extra fields and the length options — over the raw client (reactor and
// goroutines), net/http, completions and chat — against a stub that, like
// vllm serve --api-key, refuses a request without the key.
func TestRequestOptionsOnTheWire(t *testing.T) {
	const output = 5
	s := startStub(t, stub.Options{RecordRequests: true, APIKey: "sk-planted-key", Tokens: 3})
	for _, c := range []struct {
		name     string
		endpoint Endpoint
		io       string
		client   *http.Client
		natural  bool
	}{
		{"completions/reactor", EndpointCompletions, "reactor", nil, false},
		{"completions/goroutines/natural", EndpointCompletions, "goroutines", nil, true},
		{"chat/net-http/natural", EndpointChat, "goroutines", &http.Client{Transport: NewTransport()}, true},
		{"chat/reactor", EndpointChat, "reactor", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.Reset()
			q := optionsUnderTest(c.natural)
			_, res := runIO(t, Config{Targets: []string{s.URL}, Endpoint: c.endpoint, Rate: 200, Request: q, Client: c.client,
				Arrival: Arrival{Process: ArrivalConstant}, Shape: Shape{Input: 16, Output: output}, Requests: 6, Seed: 1}, c.io)
			if res.Model != "stub-model" {
				t.Errorf("model %q: the model lookup did not pass the key", res.Model)
			}
			for _, r := range res.Records {
				if !r.OK() {
					t.Fatalf("request %d failed: %s", r.ID, r.Error)
				}
			}
			es := s.Entries()
			if len(es) != 6 {
				t.Fatalf("%d requests reached the stub, want 6", len(es))
			}
			for _, e := range es {
				for k, v := range map[string]string{"Authorization": "Bearer sk-planted-key", "X-Tenant": "team-a", "X-Trace": "t 1", "Content-Type": "application/json"} {
					if got := e.Header.Get(k); got != v {
						t.Errorf("header %s = %q, want %q", k, got, v)
					}
				}
				checkBody(t, e.Body, q, output)
			}
		})
	}
	// The control: without the key the stub refuses, so the checks above
	// could fail.
	_, err := Run(context.Background(), Config{Targets: []string{s.URL}, Rate: 50, Shape: Shape{Input: 4, Output: 2}, Requests: 1})
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("no key against a stub that wants one: %v, want the model lookup refused with 401", err)
	}
}

// TestDefaultBodyUnchanged: without options the body is what mbench always
// sent, byte for byte.
func TestDefaultBodyUnchanged(t *testing.T) {
	got := string(appendCompletionBody(nil, "m", []int32{1, 2}, 3, &defaultTail))
	want := `{"model":"m","prompt":[1,2],"max_tokens":3,"min_tokens":3,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
	if got != want {
		t.Errorf("default body\n got %s\nwant %s", got, want)
	}
}

// TestRequestValidate: what cannot be sent is refused, and no message
// quotes a header's value or the key.
func TestRequestValidate(t *testing.T) {
	const secret = "s3cr3t-value"
	neg, big := f64(-0.1), f64(2.5)
	zero := f64(0)
	badK := -2
	for _, c := range []struct {
		name string
		q    Request
		want string
	}{
		{"owned header", Request{Headers: map[string]string{"content-length": secret}}, "Content-Length: mbench sets it"},
		{"request id", Request{Headers: map[string]string{"X-Request-Id": secret}}, "X-Request-Id: mbench sets it"},
		{"bad name", Request{Headers: map[string]string{"bad name": secret}}, "not a valid header name"},
		{"control char", Request{Headers: map[string]string{"X-A": secret + "\r\nX-Evil: 1"}}, "control characters"},
		{"key and authorization", Request{APIKey: secret, Headers: map[string]string{"authorization": secret}}, "give one"},
		{"key with newline", Request{APIKey: secret + "\n"}, "API key"},
		{"temperature", Request{Sampling: Sampling{Temperature: neg}}, "temperature -0.1"},
		{"top_p 0", Request{Sampling: Sampling{TopP: zero}}, "top_p 0: must be in (0, 1]"},
		{"presence", Request{Sampling: Sampling{PresencePenalty: big}}, "presence_penalty 2.5"},
		{"repetition 0", Request{Sampling: Sampling{RepetitionPenalty: zero}}, "repetition_penalty 0"},
		{"top_k", Request{Sampling: Sampling{TopK: &badK}}, "top_k -2"},
		{"owned field", Request{ExtraBody: map[string]json.RawMessage{"max_tokens": json.RawMessage(`1`)}}, `"max_tokens": mbench writes it`},
		{"sampling in extra", Request{ExtraBody: map[string]json.RawMessage{"temperature": json.RawMessage(`1`)}}, `"temperature": mbench writes it`},
		{"bad json", Request{ExtraBody: map[string]json.RawMessage{"x": json.RawMessage(`{`)}}, "not a JSON value"},
	} {
		err := c.q.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error quotes the value: %v", c.name, err)
		}
	}
	if q := optionsUnderTest(true); q.Validate() != nil {
		t.Errorf("valid options refused: %v", q.Validate())
	}
}

// TestMaxInFlightCap: a rate far above what the stub serves with a cap of
// three keeps at most three in flight (and reaches three), waits in
// schedule order, and records the waits as QueuedNs, so the load generator
// does not grade itself client-limited for the cap's delay: the grade's
// late sends are exactly the records' sends later than ClientLateMs past
// the moment each was due and had a slot.
func TestMaxInFlightCap(t *testing.T) {
	const capN = 3
	s := startStub(t, stub.Options{FirstToken: 20 * time.Millisecond, Gap: time.Millisecond, Tokens: 4})
	res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "stub-model", Rate: 400,
		Arrival: Arrival{Process: ArrivalConstant, MaxInFlight: capN}, Shape: Shape{Input: 8, Output: 4}, Requests: 40, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.MaxInflight(); got != capN {
		t.Errorf("the stub saw %d in flight at most, want the cap %d", got, capN)
	}
	if peak, _ := Concurrency(res.Records, 0, 1<<62); peak > capN {
		t.Errorf("the client had %d in flight, above the cap %d", peak, capN)
	}
	queued := 0
	sent := slices.Clone(res.Records)
	slices.SortFunc(sent, func(a, b Record) int { return int(a.SentNs - b.SentNs) })
	for i, r := range sent {
		if r.QueuedNs > 0 {
			queued++
		}
		if i > 0 && r.ScheduledNs < sent[i-1].ScheduledNs {
			t.Errorf("request %d (scheduled %d) was sent before %d (scheduled %d): the cap's queue is not in schedule order", r.ID, r.ScheduledNs, sent[i-1].ID, sent[i-1].ScheduledNs)
		}
	}
	if queued < len(res.Records)/2 {
		t.Errorf("%d of %d requests waited for a slot: at 400 req/s against ~25 ms requests most must", queued, len(res.Records))
	}
	// The cap's waits are not lateness: the grade counts only the sends
	// later than ClientLateMs past the moment each was due and had a slot.
	late := time.Duration(ClientLateMs * float64(time.Millisecond))
	nLate := 0
	for _, r := range res.Records {
		if r.Lag() > late {
			nLate++
		}
	}
	if res.Grade.Late != nLate {
		t.Errorf("grade %+v: the records show %d sends more than %v late", res.Grade, nLate, late)
	}
	var fe *FieldError
	if err := (&Config{Targets: []string{s.URL}, Arrival: Arrival{Process: ArrivalConcurrency, InFlight: 2, MaxInFlight: 2},
		Shape: Shape{Input: 1, Output: 1}, Requests: 1}).Validate(); !errors.As(err, &fe) || fe.Path != "arrival.max_in_flight" {
		t.Errorf("a closed loop with a cap: %v, want an error at arrival.max_in_flight", err)
	}
}

// TestBurst: an infinite rate schedules every request at once, sends them
// all, and grades nothing late; without a request count it is refused.
func TestBurst(t *testing.T) {
	const n = 30
	s := startStub(t, stub.Options{FirstToken: 5 * time.Millisecond, Tokens: 2})
	cfg := Config{Targets: []string{s.URL}, Model: "stub-model", Rate: math.Inf(1), Shape: Shape{Input: 8, Output: 2}, Requests: n, Seed: 3}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != n || s.MaxInflight() < 2 {
		t.Fatalf("%d records, %d in flight at once at the stub: want %d sent together", len(res.Records), s.MaxInflight(), n)
	}
	for _, r := range res.Records {
		if r.ScheduledNs != res.Records[0].ScheduledNs || !r.OK() {
			t.Errorf("request %d: scheduled %d (first %d), status %s: a burst schedules all at once", r.ID, r.ScheduledNs, res.Records[0].ScheduledNs, r.Status)
		}
	}
	if res.Grade.ClientLimited || res.Offered != 0 {
		t.Errorf("burst: client-limited %v (%s), offered %v: want not graded, offered 0 (JSON has no infinity)", res.Grade.ClientLimited, res.Grade.Reason, res.Offered)
	}
	cfg.Requests, cfg.MinCompleted = 0, 10
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "burst") {
		t.Errorf("a burst with min_completed only: %v, want refused", err)
	}
}
