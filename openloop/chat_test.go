package openloop

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// TestChatTTFTAgainstStub: the chat endpoint against a stub that streams
// vLLM's chat chunks with a 40 ms first-token delay: the role chunk (empty
// content) is not a token, so the client's first token is the stub's first
// content flush, never before it (checkAfterStub); output tokens come from
// usage, input tokens from usage.prompt_tokens (the words sent).
func TestChatTTFTAgainstStub(t *testing.T) {
	const first, gap, tokens, input = 40 * time.Millisecond, 5 * time.Millisecond, 4, 24
	s := startStub(t, stub.Options{FirstToken: first, Gap: gap, Precise: true})
	res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "stub-model", Rate: 20, Endpoint: EndpointChat,
		Arrival: Arrival{Process: ArrivalConstant}, Shape: Shape{Input: input, Output: tokens}, Requests: 7, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	// The role chunk carries choices: vLLM's chat client times it as the
	// first token and the first content chunk as one more gap.
	checkAfterStub(t, s, res, func(r Record) bool {
		return r.OK() && r.OutputTokens == tokens && r.InputTokens == input && !r.UsageMissing && len(r.ITLMs) == tokens
	})
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
