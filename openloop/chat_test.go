package openloop

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// TestChatTTFTAgainstStub: the chat endpoint against a stub that streams
// vLLM's chat chunks with a 40 ms first-token delay: the role chunk (empty
// content) is not a token, so the client's TTFT matches the stub's own
// first flush within 1 ms (median) and is never below the injected delay;
// output tokens come from usage, input tokens from usage.prompt_tokens (the
// words sent).
func TestChatTTFTAgainstStub(t *testing.T) {
	const first, gap, tokens, input = 40 * time.Millisecond, 5 * time.Millisecond, 4, 24
	s := startStub(t, stub.Options{FirstToken: first, Gap: gap, Precise: true})
	var last string
	for attempt := 1; attempt <= 3; attempt++ {
		s.Reset()
		res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "stub-model", Rate: 20, Endpoint: EndpointChat,
			Arrival: Arrival{Process: ArrivalConstant}, Shape: Shape{Input: input, Output: tokens}, Requests: 7, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		truth := map[string]time.Duration{}
		for _, e := range s.Entries() {
			truth[e.ID] = e.TTFT()
		}
		var ttfts, errs []time.Duration
		for _, r := range res.Records {
			if !r.OK() || r.OutputTokens != tokens || r.InputTokens != input || r.UsageMissing || len(r.ITLMs) != tokens-1 {
				t.Fatalf("record %+v", r)
			}
			ttfts = append(ttfts, r.TTFT())
			errs = append(errs, absDur(r.TTFT()-truth[strconv.Itoa(r.ID)]))
		}
		med, e := medianDur(ttfts), medianDur(errs)
		// Against the stub's own first flush within 1 ms, and never below
		// the injected delay: the stub's lateness on a busy machine is not
		// the client's.
		if med >= first-time.Millisecond && e <= time.Millisecond {
			return
		}
		last = "TTFT median " + med.String() + ", error vs stub " + e.String()
		t.Logf("attempt %d: %s", attempt, last)
	}
	if raceEnabled {
		t.Skipf("race detector on, timing not checked: %s", last)
	}
	t.Errorf("3 attempts failed; last: %s", last)
}

// TestChatBody: the chat request carries the prompt as one user message of
// one word per token id, and the stream options of the completion body.
func TestChatBody(t *testing.T) {
	b := string(appendChatBody(nil, "m\"x", string(appendPromptText(nil, []int32{0, 1, 256, 1000})), 7, &defaultTail))
	want := `{"model":"m\"x","messages":[{"role":"user","content":"` + promptWords[0] + " " + promptWords[1] + " " + promptWords[0] + " " + promptWords[1000%len(promptWords)] +
		`"}],"max_tokens":7,"min_tokens":7,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`
	if b != want {
		t.Errorf("body\n%s\nwant\n%s", b, want)
	}
	seen := map[string]bool{}
	for _, w := range promptWords {
		if seen[w] || strings.ContainsAny(w, " \t\n") || w == "" {
			t.Errorf("prompt word %q repeated or not one word", w)
		}
		seen[w] = true
	}
	if err := Endpoint("chat/completions").Validate(); err == nil {
		t.Error("a bad endpoint validated")
	}
}
