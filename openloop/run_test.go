package openloop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

func startStub(t *testing.T, o stub.Options) *stub.Server {
	t.Helper()
	s, err := stub.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// lockedBuffer is a sink that tests read after the run.
type lockedBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

func medianDur(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// TestTTFTAndITLAgainstStub: a stub with a 50 ms first-token delay and 10 ms
// gaps. Every request is recorded whole (its tokens, one ITL a gap), and the
// client's clock agrees with the stub's in the one way no machine can
// change: the client sees the first token after the stub flushed it and the
// end after the stub wrote it (the medians over requests, on the run's
// clock: a thread held back between two clock reads may move one stamp). How
// close the client's TTFT comes to the stub's is a timing claim, measured by
// `mbench bench-load` (TTFT error against the stub's own first flush;
// docs/development.md).
func TestTTFTAndITLAgainstStub(t *testing.T) {
	const first, gap, tokens = 50 * time.Millisecond, 10 * time.Millisecond, 6
	s := startStub(t, stub.Options{FirstToken: first, Gap: gap, Precise: true})
	res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "stub-model", Rate: 20,
		Arrival: Arrival{Process: ArrivalConstant}, Shape: Shape{Input: 32, Output: tokens}, Requests: 7, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkAfterStub(t, s, res, func(r Record) bool {
		return r.OK() && r.OutputTokens == tokens && !r.UsageMissing && len(r.ITLMs) == tokens-1 && r.E2EL() >= r.TTFT()
	})
}

// checkAfterStub checks that every record passes ok, that the stub logged
// each, and that, in the median over requests, the client saw the first
// token and the end no earlier than the stub sent them.
func checkAfterStub(t *testing.T, s *stub.Server, res *Result, ok func(Record) bool) {
	t.Helper()
	truth := map[string]stub.Entry{}
	for _, e := range s.Entries() {
		truth[e.ID] = e
	}
	at := func(ns int64) time.Time { return res.Start.Add(time.Duration(ns)) }
	var firstAfter, doneAfter []time.Duration
	for _, r := range res.Records {
		e, seen := truth[strconv.Itoa(r.ID)]
		if !ok(r) || !seen || e.FirstFlush.IsZero() {
			t.Fatalf("record %+v (the stub saw it: %v)", r, seen)
		}
		firstAfter = append(firstAfter, at(r.FirstTokenNs).Sub(e.FirstFlush))
		doneAfter = append(doneAfter, at(r.DoneNs).Sub(e.Done))
	}
	t.Logf("the client saw the first token %v and the end %v after the stub sent them (medians)", medianDur(firstAfter), medianDur(doneAfter))
	if medianDur(firstAfter) < 0 || medianDur(doneAfter) < 0 {
		t.Errorf("the client saw tokens before the stub sent them: first token %v, end %v after (medians; all %v, %v)",
			medianDur(firstAfter), medianDur(doneAfter), firstAfter, doneAfter)
	}
}

// TestOpenLoopModestRate: 200 req/s Poisson for 1.5 s against a stub.
// The records are the run's truth whatever the machine: the measured count
// the seed fixes, each request scheduled at the schedule's offset, seen by
// the stub, with its first token no earlier than the stub flushed it
// (checkAfterStub's medians), and the self-grade counting exactly the late
// sends the records show. How late the sends are and how close TTFT comes
// to the stub's are timing claims: `mbench bench-load` measures them
// (docs/development.md).
func TestOpenLoopModestRate(t *testing.T) {
	s := startStub(t, stub.Options{Tokens: 16, FirstToken: 2 * time.Millisecond})
	var sink lockedBuffer
	cfg := Config{Targets: []string{s.URL}, Model: "stub-model", Rate: 200, Shape: Shape{Input: 64, Output: 16},
		Seed: 5, Warmup: 20, Duration: 1500 * time.Millisecond, Cell: "cell-x", Block: 3, Sink: &sink}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The measured count is fixed by the seed: offsets within 1.5 s.
	offs, _ := Offsets(Arrival{}, 200, 5, 2000)
	wantMeasured := 0
	for _, o := range offs[20:] {
		if o-offs[20] < int64(1500*time.Millisecond) {
			wantMeasured++
		}
	}
	g := res.Grade
	if g.Sent != wantMeasured || res.StopReason != "duration" {
		t.Errorf("measured %d (stop %q), want %d (duration)", g.Sent, res.StopReason, wantMeasured)
	}
	t.Logf("grade %+v cpu %.0f%%", g, res.ClientCPUPct)
	late := time.Duration(ClientLateMs * float64(time.Millisecond))
	if g.OKRatio != 1 {
		t.Errorf("grade %+v: want all ok", g)
	}
	nLate := 0
	for _, r := range res.Records {
		if r.Phase != PhaseMeasure || r.Lag() <= late {
			continue
		}
		nLate++
	}
	if g.Late != nLate || (g.ClientLimited && !strings.Contains(g.Reason, fmt.Sprintf("%d of %d requests", nLate, g.Sent))) {
		t.Errorf("grade %+v: the records show %d sends more than %v late", g, nLate, late)
	}
	for i, r := range res.Records {
		if r.ID != i || r.Cell != "cell-x" || r.Block != 3 || r.Target != s.URL || r.InputTokens != 64 || r.OutputTokens != 16 {
			t.Fatalf("record %+v", r)
		}
		if want := map[bool]string{true: PhaseWarmup, false: PhaseMeasure}[i < 20]; r.Phase != want {
			t.Fatalf("record %d phase %q, want %q", i, r.Phase, want)
		}
		// The measured schedule resumes, shifted whole, once the 20
		// warm-up requests have finished: each phase keeps the schedule's
		// own gaps.
		first := 0
		if i >= 20 {
			first = 20
		}
		if r.ScheduledNs-res.Records[first].ScheduledNs != offs[i]-offs[first] {
			t.Fatalf("record %d scheduled at +%d from record %d, schedule says %d", i, r.ScheduledNs-res.Records[first].ScheduledNs, first, offs[i]-offs[first])
		}
		if r.SentNs < r.ScheduledNs {
			t.Errorf("record %d sent at %d, before it was due at %d", i, r.SentNs, r.ScheduledNs)
		}
	}
	stubSaw := map[string]stub.Entry{}
	for _, e := range s.Entries() {
		stubSaw[e.ID] = e
	}
	checkAfterStub(t, s, res, func(r Record) bool {
		e := stubSaw[strconv.Itoa(r.ID)]
		return r.OK() && e.Model == "stub-model" && e.MaxTokens == 16
	})
	// The sink holds the same records, readable strictly.
	back, err := ReadRecords(&sink)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(back, func(i, j int) bool { return back[i].ID < back[j].ID })
	if !reflect.DeepEqual(back, res.Records) {
		t.Errorf("sink records differ from the result's (%d vs %d)", len(back), len(res.Records))
	}
	if !res.WindowStart.After(res.Start) || !res.WindowEnd.After(res.WindowStart) {
		t.Errorf("window %v .. %v (start %v)", res.WindowStart, res.WindowEnd, res.Start)
	}
}

func TestHTTPErrorsAndBrokenStreams(t *testing.T) {
	s := startStub(t, stub.Options{Tokens: 4, Fault: func(n int64, id string) stub.Fault {
		switch i, _ := strconv.Atoi(id); i % 6 {
		case 0:
			return stub.Fault{Status: 500, Body: "internal boom " + strings.Repeat("x", 300)}
		case 1:
			return stub.Fault{Status: 429, Body: "slow down\n"}
		case 2:
			return stub.Fault{Break: true, BreakAfter: 2}
		case 3:
			return stub.Fault{StreamError: "engine died"}
		case 4:
			return stub.Fault{NoUsage: true}
		}
		return stub.Fault{}
	}})
	for _, io := range []string{"reactor", "goroutines"} {
		t.Run("io="+io, func(t *testing.T) {
			_, res := runIO(t, Config{Targets: []string{s.URL + "/"}, Model: "m", Rate: 200,
				Arrival: Arrival{Process: ArrivalConstant}, Shape: Shape{Input: 8, Output: 4}, Requests: 12}, io)
			checkBrokenStreams(t, res)
		})
	}
}

// checkBrokenStreams checks TestHTTPErrorsAndBrokenStreams's records.
func checkBrokenStreams(t *testing.T, res *Result) {
	for _, r := range res.Records {
		var want string
		switch r.ID % 6 {
		case 0:
			want = "HTTP 500: internal boom " + strings.Repeat("x", 200-len("internal boom "))
		case 1:
			want = "HTTP 429: slow down"
		case 2:
			want = "unexpected EOF"
		case 3:
			want = "stream error: engine died"
		}
		if want == "" {
			if !r.OK() || r.OutputTokens != 4 || r.UsageMissing != (r.ID%6 == 4) {
				t.Errorf("record %d: %+v, want ok (usage missing: %v)", r.ID, r, r.ID%6 == 4)
			}
			continue
		}
		if r.OK() || r.Error != want {
			t.Errorf("record %d: status %s error %q, want error %q", r.ID, r.Status, r.Error, want)
		}
		if r.ID%6 < 2 && (r.FirstTokenNs != 0 || r.HTTPStatus != []int{500, 429}[r.ID%6]) {
			t.Errorf("record %d: an HTTP error must carry no latency: %+v", r.ID, r)
		}
	}
}

func TestMinCompletedStops(t *testing.T) {
	s := startStub(t, stub.Options{Tokens: 2, FirstToken: time.Millisecond})
	res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Rate: 400, Shape: Shape{Input: 8, Output: 2},
		Warmup: 5, MinCompleted: 60})
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, r := range res.Records {
		if r.Phase == PhaseMeasure && r.OK() {
			ok++
		}
	}
	if res.StopReason != "min_completed" || ok < 60 || res.Model != "stub-model" {
		t.Errorf("stop %q, %d measured ok, model %q; want min_completed, ≥ 60, stub-model", res.StopReason, ok, res.Model)
	}
}

func TestDrainTimeout(t *testing.T) {
	s := startStub(t, stub.Options{Tokens: 3, FirstToken: time.Millisecond, Gap: 2 * time.Second})
	res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "m", Rate: 100, Shape: Shape{Input: 8, Output: 3},
		Requests: 4, DrainTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The streams' own end (two 2 s gaps) never came: a run that waited
	// for it would record them ok.
	if len(res.Records) != 4 {
		t.Errorf("%d records, want 4", len(res.Records))
	}
	for _, r := range res.Records {
		if r.OK() || r.Error != "drain timeout" || r.FirstTokenNs == 0 {
			t.Errorf("record %+v: want error \"drain timeout\" after a first token", r)
		}
	}
}

func TestAbortIf(t *testing.T) {
	slow := startStub(t, stub.Options{Tokens: 2, FirstToken: 3 * time.Second})
	for _, tc := range []struct {
		name  string
		abort AbortIf
		why   string
	}{
		{"inflight", AbortIf{MaxInflight: 10}, "more than 10 requests in flight"},
		{"ttft", AbortIf{MaxTTFT: 100 * time.Millisecond}, "a request waited more than 100ms for its first token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), Config{Targets: []string{slow.URL}, Model: "m", Rate: 200,
				Shape: Shape{Input: 8, Output: 2}, Requests: 2000, AbortIf: tc.abort})
			if err != nil {
				t.Fatal(err)
			}
			// The stub's first token is 3 s away, the schedule 10 s long:
			// an abort leaves most of the 2000 requests unsent.
			if !res.Aborted || res.AbortReason != tc.why || res.StopReason != "aborted" || len(res.Records) >= 2000 {
				t.Fatalf("aborted %v %q stop %q with %d records", res.Aborted, res.AbortReason, res.StopReason, len(res.Records))
			}
			for _, r := range res.Records {
				if r.OK() || r.Error != "aborted: "+tc.why {
					t.Fatalf("record %+v", r)
				}
			}
			if res.WindowEnd.IsZero() {
				t.Error("no window end")
			}
		})
	}
}

func TestRoundRobinAndCancel(t *testing.T) {
	a := startStub(t, stub.Options{Tokens: 1})
	b := startStub(t, stub.Options{Tokens: 1})
	res, err := Run(context.Background(), Config{Targets: []string{a.URL, b.URL}, Model: "m", Rate: 500,
		Arrival: Arrival{Process: ArrivalConstant}, Shape: Shape{Input: 4, Output: 1}, Requests: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 10 {
		t.Errorf("%d records, want 10", len(res.Records))
	}
	if na, nb := len(a.Entries()), len(b.Entries()); na != 5 || nb != 5 {
		t.Errorf("targets got %d and %d requests, want 5 and 5", na, nb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	slow := startStub(t, stub.Options{Tokens: 2, FirstToken: 5 * time.Second})
	res, err = Run(ctx, Config{Targets: []string{slow.URL}, Model: "m", Rate: 50, Shape: Shape{Input: 4, Output: 2}, MinCompleted: 10})
	if err == nil || res == nil || res.StopReason != "canceled" || len(res.Records) == 0 {
		t.Fatalf("cancelled run: err %v, result %+v", err, res)
	}
	for _, r := range res.Records {
		if r.Error != "canceled" {
			t.Errorf("record %+v: want error canceled", r)
		}
	}
}

func TestCacheFill(t *testing.T) {
	s := startStub(t, stub.Options{RecordPrompts: true})
	res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "m", Rate: 200,
		Shape: Shape{Input: 32, Output: 2, CacheFill: &CacheFill{Prefixes: 12, PrefixTokens: 48}}, Warmup: 2, Requests: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 19 {
		t.Fatalf("%d records, want 12 fill + 2 warmup + 5 measure", len(res.Records))
	}
	var lastFill int64
	for _, r := range res.Records[:12] {
		if r.Phase != PhaseFill || !r.OK() || r.InputTokens != 48 || r.OutputTokens != 1 {
			t.Fatalf("fill record %+v", r)
		}
		lastFill = max(lastFill, r.DoneNs)
	}
	for _, r := range res.Records[12:] {
		if r.Phase == PhaseFill || r.SentNs < lastFill {
			t.Fatalf("record %+v sent before the fill ended (%d)", r, lastFill)
		}
	}
	seen := map[string]bool{}
	for _, e := range s.Entries() {
		k := joinInts(e.Prompt)
		if seen[k] {
			t.Fatalf("two requests share the prompt of request %s", e.ID)
		}
		seen[k] = true
	}
}

// TestPromptsOwnTheirBytes: requests are prepared ahead in batches over one
// reused body buffer (see prepare); through either client, for token-id
// prompts on both endpoints and for a dataset's text prompts, every body
// the server took is whole and its own: token-id prompts differ from every
// other request's and have the size asked for, and a dataset request's
// prompt and max_tokens are one item's.
func TestPromptsOwnTheirBytes(t *testing.T) {
	items, err := LoadDataset(Dataset{Path: tinyShareGPT, Format: DatasetShareGPT}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		shape Shape
		ep    Endpoint
	}{
		{"tokens", Shape{Input: 24, Output: 1}, EndpointCompletions},
		{"chat", Shape{Input: 24, Output: 1}, EndpointChat},
		{"dataset", Shape{Dataset: &Dataset{Path: tinyShareGPT, Format: DatasetShareGPT}}, EndpointCompletions},
	} {
		for _, client := range []string{"raw", "net/http"} {
			t.Run(tc.name+"/"+client, func(t *testing.T) {
				s := startStub(t, stub.Options{RecordPrompts: true, RecordRequests: true})
				cfg := Config{Targets: []string{s.URL}, Model: "m", Rate: 2000, Shape: tc.shape, Endpoint: tc.ep, Requests: 150}
				if client == "net/http" {
					cfg.Client = &http.Client{}
				}
				res, err := Run(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				entries := s.Entries()
				if len(entries) != len(res.Records) || len(entries) < 150 {
					t.Fatalf("server took %d requests, %d records", len(entries), len(res.Records))
				}
				seen := map[string]string{}
				for _, e := range entries {
					var body struct {
						Prompt    json.RawMessage            `json:"prompt"`
						Messages  []struct{ Content string } `json:"messages"`
						MaxTokens int                        `json:"max_tokens"`
					}
					if err := json.Unmarshal([]byte(e.Body), &body); err != nil {
						t.Fatalf("request %s: body %.80q: %v", e.ID, e.Body, err)
					}
					var key string
					switch tc.name {
					case "tokens":
						if len(e.Prompt) != 24 {
							t.Fatalf("request %s: %d prompt tokens, want 24", e.ID, len(e.Prompt))
						}
						key = joinInts(e.Prompt)
					case "chat":
						if len(body.Messages) != 1 || len(strings.Fields(body.Messages[0].Content)) != 24 {
							t.Fatalf("request %s: messages %+v, want one of 24 words", e.ID, body.Messages)
						}
						key = body.Messages[0].Content
					case "dataset":
						var prompt string
						_ = json.Unmarshal(body.Prompt, &prompt)
						if !slices.ContainsFunc(items, func(it DatasetItem) bool { return it.Prompt == prompt && it.Output == body.MaxTokens }) {
							t.Fatalf("request %s: prompt %q with max_tokens %d is no item of the dataset", e.ID, prompt, body.MaxTokens)
						}
						continue
					}
					if other, ok := seen[key]; ok {
						t.Fatalf("requests %s and %s carry the same prompt", other, e.ID)
					}
					seen[key] = e.ID
				}
			})
		}
	}
}

func joinInts(xs []int32) string {
	var b strings.Builder
	for _, x := range xs {
		b.WriteString(strconv.Itoa(int(x)))
		b.WriteByte(',')
	}
	return b.String()
}

func TestConfigErrors(t *testing.T) {
	ok := Config{Targets: []string{"http://127.0.0.1:1"}, Rate: 1, Shape: Shape{Input: 1, Output: 1}, Requests: 1}
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Targets = nil }, "openloop: config: targets: need at least one base URL"},
		{func(c *Config) { c.Targets = []string{"127.0.0.1:8000"} }, `openloop: config: targets: "127.0.0.1:8000" is not an http(s) base URL`},
		{func(c *Config) { c.Rate = 0 }, "openloop: config: rate: must be > 0 req/s, got 0"},
		{func(c *Config) { c.Requests = 0 }, "openloop: config: stop condition: set min_completed, requests or duration"},
		{func(c *Config) { c.Shape.Input = 0 }, `openloop: config: shape "": input: must be in [1, 4194304] tokens, got 0`},
		{func(c *Config) { c.Arrival.Process = "x" }, `openloop: config: arrival: process: "x" is not poisson, gamma, constant or concurrency`},
		{func(c *Config) { c.Arrival = Arrival{Process: ArrivalConcurrency, InFlight: 2} }, "openloop: config: rate: a closed loop (concurrency) has no rate"},
		{func(c *Config) {
			c.Shape = Shape{Trace: &Trace{Path: "t.jsonl"}}
			c.Arrival.Ramp = &Ramp{Kind: RampLinear, Duration: time.Second}
		},
			"openloop: config: arrival: ramp: a trace replays its own send times: no rate to ramp"},
		{func(c *Config) { c.Shape = Shape{Trace: &Trace{Path: "/nonexistent.jsonl"}}; c.Model = "m" }, "openloop: trace: open /nonexistent.jsonl: no such file or directory"},
	} {
		c := ok
		tc.mut(&c)
		_, err := Run(context.Background(), c)
		if err == nil || err.Error() != tc.want {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}
