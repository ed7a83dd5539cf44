package openloop

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

const syntheticTrace = "testdata/synthetic_trace.jsonl"

// synthTrace generates the synthetic Mooncake-format trace shipped in
// testdata: 24 agentic sessions of 2–6 turns and 12 single requests over
// about a minute. Every prompt starts with a 2-block system prompt (ids 1, 2);
// each turn of a session repeats the previous turn's full blocks and appends
// new ones (hash ids are prefix-chained, as in Mooncake traces: a block's id
// is new whenever anything before it differs), and most last blocks are
// partial. No third-party data.
func synthTrace() []byte {
	r := rand.New(rand.NewPCG(2026, 5))
	next := int64(100)
	newID := func() int64 { next++; return next }
	type line struct {
		ts   float64
		text string
	}
	var lines []line
	for s := range 24 {
		ts := r.Float64() * 60000
		full := []int64{1, 2}
		turns := 2 + r.IntN(5)
		for k := 1; k <= turns; k++ {
			ids := append([]int64(nil), full...)
			for range 1 + r.IntN(3) {
				ids = append(ids, newID())
			}
			input := len(ids) * TraceBlockTokens
			if r.IntN(4) > 0 {
				input -= 1 + r.IntN(TraceBlockTokens-1) // last block partial
			} else {
				full = ids // all blocks full: the next turn repeats them all
			}
			if input%TraceBlockTokens != 0 {
				full = ids[:len(ids)-1]
			}
			lines = append(lines, line{ts, fmt.Sprintf(`{"timestamp": %.0f, "input_length": %d, "output_length": %d, "hash_ids": %s, "session_id": "sess-%02d", "turn": %d}`,
				ts, input, 16+r.IntN(200), idList(ids), s, k)})
			ts += 2000 + r.Float64()*6000
		}
	}
	for range 12 {
		ts := r.Float64() * 60000
		ids := []int64{1, newID()}
		if r.IntN(2) == 0 {
			ids = []int64{newID(), newID()}
		}
		lines = append(lines, line{ts, fmt.Sprintf(`{"timestamp": %.0f, "input_length": %d, "output_length": %d, "hash_ids": %s}`,
			ts, 2*TraceBlockTokens-r.IntN(300), 16+r.IntN(100), idList(ids))})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].ts < lines[j].ts })
	var b bytes.Buffer
	for _, l := range lines {
		b.WriteString(l.text + "\n")
	}
	return b.Bytes()
}

func idList(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func TestSyntheticTraceGolden(t *testing.T) {
	got := synthTrace()
	if *update {
		if err := os.WriteFile(syntheticTrace, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(syntheticTrace)
	if err != nil {
		t.Fatalf("%v (run go test -run SyntheticTraceGolden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run go test ./openloop -run SyntheticTraceGolden -update", syntheticTrace)
	}
	reqs, err := LoadTrace(syntheticTrace)
	if err != nil {
		t.Fatal(err)
	}
	sessions := map[string]int{}
	for _, r := range reqs {
		sessions[r.sessionKey()]++
	}
	if len(reqs) < 80 || len(sessions) != 36 {
		t.Errorf("%d requests in %d sessions", len(reqs), len(sessions))
	}
}

func TestParseTraceErrors(t *testing.T) {
	ok := `{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}`
	for _, tc := range []struct{ in, want string }{
		{ok + "\n\n" + `{"timestamp": 5, "input_length": 6`, "t.jsonl:3: json: unexpected end of JSON input"},
		{`{"input_length": 6, "output_length": 1}`, "t.jsonl:1: timestamp: missing (ms since the trace's start)"},
		{`{"timestamp": -1, "input_length": 6, "output_length": 1}`, "t.jsonl:1: timestamp: must be a finite number ≥ 0, got -1"},
		{`{"timestamp": 1, "output_length": 1}`, "t.jsonl:1: input_length: missing (prompt tokens)"},
		{`{"timestamp": 1, "input_length": 0, "output_length": 1}`, "t.jsonl:1: input_length: must be in [1, 4194304], got 0"},
		{`{"timestamp": 1, "input_length": "12", "output_length": 1}`, "t.jsonl:1: input_length: want int, got string"},
		{`{"timestamp": 1, "input_length": 12}`, "t.jsonl:1: output_length: missing (completion tokens)"},
		{`{"timestamp": 1, "input_length": 513, "output_length": 1, "hash_ids": [1, 2, 3]}`, "t.jsonl:1: hash_ids: 3 blocks, but input_length 513 needs at most 2 blocks of 512 tokens"},
		{`{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}`, "t.jsonl:1: hash_ids: want int64, got string"},
		{`{"timestamp": 1, "input_length": 5, "output_length": 1, "session_id": [1]}`, "t.jsonl:1: session_id: want a string or an integer, got [1]"},
		{`{"timestamp": 1, "input_length": 5, "output_length": 1, "turn": -2}`, "t.jsonl:1: turn: must be ≥ 0, got -2"},
		{ok + "\n" + `{"timestamp": 1, "input_length": 5, "output_length": 1, "session_id": "a", "turn": 1}` + "\n" + `{"timestamp": 2, "input_length": 5, "output_length": 1, "session_id": "a", "turn": 1}`,
			`t.jsonl:3: turn: session "a" repeats turn 1 (first at line 2)`},
		{"[]", "t.jsonl:1: json: json: cannot unmarshal array into Go value of type openloop.traceLine"},
	} {
		_, err := ParseTrace(strings.NewReader(tc.in), "t.jsonl")
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseTrace(%.50q) = %v\nwant %q", tc.in, err, tc.want)
		}
	}
	reqs, err := ParseTrace(strings.NewReader(ok+"\n"+`{"timestamp": 7.5, "input_length": 5, "output_length": 1, "session_id": 42, "turn": 0, "extra": true}`), "t")
	if err != nil || len(reqs) != 2 || reqs[1].SessionID != "42" || !reqs[1].HasTurn || reqs[1].Line != 2 || reqs[1].TimestampMs != 7.5 {
		t.Errorf("ParseTrace = %+v, %v", reqs, err)
	}
}

func FuzzParseTrace(f *testing.F) {
	f.Add([]byte(`{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2], "session_id": "s", "turn": 1}`))
	f.Add([]byte("{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1}\n\n{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		reqs, err := ParseTrace(bytes.NewReader(b), "f")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f:") {
				t.Fatalf("error without file:line: %v", err)
			}
			return
		}
		for _, r := range reqs {
			if r.InputLength < 1 || r.OutputLength < 1 || r.TimestampMs < 0 || len(r.HashIDs)*TraceBlockTokens >= r.InputLength+TraceBlockTokens {
				t.Fatalf("accepted %+v", r)
			}
			g := promptGen{seed: 1}
			if toks := g.trace(0, &r, nil); r.InputLength < 10000 && len(toks) != r.InputLength {
				t.Fatalf("prompt of %d tokens for input_length %d", len(toks), r.InputLength)
			}
		}
	})
}

// predictedRepeatTokens replays a trace's hash ids through an infinite prefix
// cache: a block's tokens are repeats when its id — and so its whole prefix —
// was seen before, counting only the 16-token blocks a partial last block
// fills.
func predictedRepeatTokens(reqs []TraceRequest) (repeated, total int) {
	seenLen := map[int64]int{} // longest prefix of the block seen so far
	for _, r := range reqs {
		total += r.InputLength
		chain := true
		for j, id := range r.HashIDs {
			n := min(TraceBlockTokens, r.InputLength-j*TraceBlockTokens)
			if chain {
				repeated += min(n, seenLen[id]) / 16 * 16
				chain = seenLen[id] >= n
			}
			seenLen[id] = max(seenLen[id], n)
		}
	}
	return repeated, total
}

func TestTracePromptsReuseAsHashIDsSay(t *testing.T) {
	reqs, err := LoadTrace(syntheticTrace)
	if err != nil {
		t.Fatal(err)
	}
	g := promptGen{seed: 9}
	var prompts [][]int32
	for i := range reqs {
		toks := g.trace(i, &reqs[i], nil)
		if len(toks) != reqs[i].InputLength {
			t.Fatalf("line %d: %d tokens, want %d", reqs[i].Line, len(toks), reqs[i].InputLength)
		}
		prompts = append(prompts, toks)
	}
	got, total := repeatedBlockTokens(prompts)
	want, total2 := predictedRepeatTokens(reqs)
	if total != total2 || got != want {
		t.Errorf("repeated tokens: prompts %d, predicted from hash_ids %d (of %d)", got, want, total)
	}
	t.Logf("infinite-cache hit rate of the synthetic trace: %.1f%%", 100*float64(got)/float64(total))
}

func TestTraceReplaySessions(t *testing.T) {
	s := startStub(t, stub.Options{Tokens: 3, FirstToken: 5 * time.Millisecond, Gap: 2 * time.Millisecond})
	var sink lockedBuffer
	res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "m", Rate: 2, Sink: &sink,
		Shape: Shape{Trace: &Trace{Path: syntheticTrace, TimeScale: 200, MaxInflightSessions: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	reqs, _ := LoadTrace(syntheticTrace)
	if len(res.Records) != len(reqs) || res.StopReason != "trace_end" {
		t.Fatalf("%d records (stop %q), want %d", len(res.Records), res.StopReason, len(reqs))
	}
	bySession := map[string][]Record{}
	for _, r := range res.Records {
		if !r.OK() || r.TraceNs == 0 || r.ScheduledNs < r.TraceNs {
			t.Fatalf("record %+v", r)
		}
		if r.Session != "" {
			bySession[r.Session] = append(bySession[r.Session], r)
		}
	}
	for sid, rs := range bySession {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Turn < rs[j].Turn })
		for k := 1; k < len(rs); k++ {
			if rs[k].Turn != k+1 || rs[k].SentNs < rs[k-1].DoneNs || rs[k].ScheduledNs < rs[k-1].DoneNs {
				t.Errorf("session %s: turn %d sent at %d before turn %d finished at %d", sid, rs[k].Turn, rs[k].SentNs, rs[k-1].Turn, rs[k-1].DoneNs)
			}
		}
	}
	per, active := s.Sessions()
	for sid, n := range per {
		if n != 1 {
			t.Errorf("session %s had %d requests in flight at once", sid, n)
		}
	}
	if active > 3 || active < 2 {
		t.Errorf("the stub saw %d sessions in flight at once, want 2..3 (max_inflight_sessions 3)", active)
	}
	// The grade counts every request and applies no KS test to a trace. Send
	// lag is a timing of this process, not a truth of the records: only that
	// no request went out before its scheduled time is asserted.
	if g := res.Grade; g.Sent != len(reqs) || g.KSApplicable || g.LagP50Ms < 0 {
		t.Errorf("grade %+v", g)
	}
}

func TestTraceReplayLimits(t *testing.T) {
	s := startStub(t, stub.Options{Tokens: 1, FirstToken: 30 * time.Millisecond}) // long enough for sessions to overlap
	res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "m", Warmup: 3,
		Shape: Shape{Trace: &Trace{Path: syntheticTrace, TimeScale: 1000, RequestLimit: 20}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 20 || res.Records[2].Phase != PhaseWarmup || res.Records[3].Phase != PhaseMeasure {
		t.Fatalf("%d records; phases %v %v", len(res.Records), res.Records[2].Phase, res.Records[3].Phase)
	}
	if _, active := s.Sessions(); active < 2 {
		t.Errorf("without max_inflight_sessions the stub saw at most %d sessions at once", active)
	}
}

func TestSampleTrace(t *testing.T) {
	in, err := os.ReadFile(syntheticTrace)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := ParseTrace(bytes.NewReader(in), "all")
	sizes := map[string]int{}
	for _, r := range all {
		sizes[r.sessionKey()]++
	}
	inLines := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(in)), "\n") {
		inLines[l] = true
	}
	sample := func(seed int64, viaPipe bool) string {
		var out bytes.Buffer
		var r interface{ Read([]byte) (int, error) } = bytes.NewReader(in)
		if viaPipe {
			r = struct{ *bytes.Buffer }{bytes.NewBuffer(in)} // not a Seeker: goes through a temp file
		}
		if err := SampleTrace(context.Background(), r, &out, 40, seed); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	a := sample(1, false)
	if b := sample(1, true); a != b {
		t.Error("the same seed samples differently from a file and from a pipe")
	}
	if c := sample(2, false); a == c {
		t.Error("seeds 1 and 2 sample the same sessions")
	}
	got, err := ParseTrace(strings.NewReader(a), "sample")
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range got {
		if r.SessionID != "" { // requests without a session are sessions of one
			count[r.sessionKey()]++
		}
	}
	for k, n := range count {
		if n != sizes[k] {
			t.Errorf("session %s: %d of its %d requests sampled", k, n, sizes[k])
		}
	}
	if len(got) < 33 || len(got) > 47 {
		t.Errorf("sampled %d requests, want about 40", len(got))
	}
	for _, l := range strings.Split(strings.TrimSpace(a), "\n") {
		if !inLines[l] {
			t.Fatalf("line not copied verbatim: %s", l)
		}
	}
	// Order is kept: timestamps non-decreasing as in the input.
	for i := 1; i < len(got); i++ {
		if got[i].TimestampMs < got[i-1].TimestampMs {
			t.Fatal("sample out of order")
		}
	}
	var out bytes.Buffer
	err = SampleTrace(context.Background(), strings.NewReader("{\"timestamp\": 1}\n"), &out, 5, 1)
	if err == nil || err.Error() != "trace sample: trace:1: input_length: missing (prompt tokens)" {
		t.Errorf("bad input: %v", err)
	}
}

func TestTraceReplayTimeoutDrains(t *testing.T) {
	s := startStub(t, stub.Options{Tokens: 2, FirstToken: 5 * time.Second})
	res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "m", Timeout: 300 * time.Millisecond,
		DrainTimeout: 200 * time.Millisecond, Shape: Shape{Trace: &Trace{Path: syntheticTrace, TimeScale: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	// The stub's first token is 5 s away: every request ends cut by the
	// drain, none with a first token (a run that waited for them would
	// have one in each).
	if res.StopReason != "timeout" || len(res.Records) == 0 {
		t.Fatalf("stop %q with %d records; want timeout", res.StopReason, len(res.Records))
	}
	for _, r := range res.Records {
		if r.Error != "drain timeout" || r.FirstTokenNs != 0 {
			t.Fatalf("record %+v", r)
		}
	}
}

// TestTraceReplayKeepsLateness: 3,000 sessions that all start at the same
// trace time cannot all be sent within the 5 ms session lead, yet every
// request stays scheduled at its trace time (no session slot limit): the
// lateness is in its send lag, never moved into its schedule.
func TestTraceReplayKeepsLateness(t *testing.T) {
	var b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&b, "{\"timestamp\": 10, \"input_length\": 8, \"output_length\": 1, \"hash_ids\": [%d], \"session_id\": \"s%d\", \"turn\": 1}\n", i+1, i)
	}
	path := filepath.Join(t.TempDir(), "burst.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startStub(t, stub.Options{Tokens: 1})
	res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "m", Shape: Shape{Trace: &Trace{Path: path}}})
	if err != nil {
		t.Fatal(err)
	}
	var maxLag time.Duration
	for _, r := range res.Records {
		if r.ScheduledNs != r.TraceNs {
			t.Fatalf("record %d: scheduled %d, trace time %d: lateness moved into the schedule", r.ID, r.ScheduledNs, r.TraceNs)
		}
		maxLag = max(maxLag, r.Lag())
	}
	t.Logf("max send lag %v over %d requests", maxLag, len(res.Records))
	if maxLag <= sessionLead || res.Grade.LagMaxMs != float64(maxLag)/1e6 {
		t.Errorf("max lag %v, grade's %.3f ms: want lateness beyond the %v session lead, in the grade", maxLag, res.Grade.LagMaxMs, sessionLead)
	}
}
