package simengine

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var (
	chatRoleRe = regexp.MustCompile(`^\{"id":"(chatcmpl-[0-9a-f]{32})","object":"chat.completion.chunk","created":(\d+),"model":"sim-model",` +
		`"choices":\[\{"index":0,"delta":\{"role":"assistant","content":""\},"logprobs":null,"finish_reason":null\}\]\}$`)
	chatTokenRe = regexp.MustCompile(`^\{"id":"(chatcmpl-[0-9a-f]{32})","object":"chat.completion.chunk","created":(\d+),"model":"sim-model",` +
		`"choices":\[\{"index":0,"delta":\{"content":("[^"]*")\},"logprobs":null,"finish_reason":(null|"length"|"stop")(,"stop_reason":null)?\}\]\}$`)
	chatUsageRe = regexp.MustCompile(`^\{"id":"(chatcmpl-[0-9a-f]{32})","object":"chat.completion.chunk","created":(\d+),"model":"sim-model",` +
		`"choices":\[\],"usage":\{"prompt_tokens":(\d+),"total_tokens":(\d+),"completion_tokens":(\d+)\}\}$`)
)

// postChat sends a /v1/chat/completions body.
func (te *testEngine) postChat(t *testing.T, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(te.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestChatStreamFormat: a streamed chat completion is vLLM's chunk sequence
// (role chunk, one delta.content chunk per token, the last with
// finish_reason "length" and stop_reason, the usage chunk, [DONE]), and its
// usage counts the same prompt tokens as a completion of the same words.
func TestChatStreamFormat(t *testing.T) {
	te := startEngine(t, fastCfg())
	words := "alpha beta gamma delta epsilon zeta eta"
	const maxTok = 5
	status, out := te.postChat(t, `{"model":"sim-model","messages":[{"role":"user","content":"`+words+`"}],"max_tokens":5,"min_tokens":5,`+
		`"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, out)
	}
	evs := sseEvents(t, out)
	if len(evs) != 1+maxTok+2 {
		t.Fatalf("got %d events, want role + %d tokens + usage + [DONE]:\n%s", len(evs), maxTok, out)
	}
	m := chatRoleRe.FindStringSubmatch(evs[0])
	if m == nil {
		t.Fatalf("role chunk not shaped like vLLM's: %s", evs[0])
	}
	id := m[1]
	for i := 1; i <= maxTok; i++ {
		m := chatTokenRe.FindStringSubmatch(evs[i])
		if m == nil {
			t.Fatalf("chunk %d not shaped like vLLM's: %s", i, evs[i])
		}
		last := i == maxTok
		if m[1] != id || (m[4] == `"length"`) != last || (m[5] != "") != last {
			t.Errorf("chunk %d: id %s finish %s stop %q (last %t)", i, m[1], m[4], m[5], last)
		}
	}
	u := chatUsageRe.FindStringSubmatch(evs[maxTok+1])
	if u == nil || u[1] != id || u[3] != "7" || u[5] != "5" || u[4] != "12" {
		t.Fatalf("usage chunk %s: want prompt 7, completion 5", evs[maxTok+1])
	}
	if evs[len(evs)-1] != "[DONE]" {
		t.Errorf("last event %q", evs[len(evs)-1])
	}
	// The same words as a completion prompt: the same usage.
	status, out = te.post(t, `{"prompt":"`+words+`","max_tokens":5,"min_tokens":5,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`)
	evs = sseEvents(t, out)
	if um := usageChunkRe.FindStringSubmatch(evs[len(evs)-2]); status != 200 || um == nil || um[3] != "7" || um[5] != "5" {
		t.Errorf("completion of the same words: status %d, usage %s", status, evs[len(evs)-2])
	}
}

// TestChatWhole: without stream, one chat.completion object with the
// message and the usage.
func TestChatWhole(t *testing.T) {
	te := startEngine(t, fastCfg())
	status, out := te.postChat(t, `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a b c"}]}],"max_completion_tokens":3,"min_tokens":3,"ignore_eos":true}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, out)
	}
	var v struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct{ Role, Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Object != "chat.completion" || len(v.Choices) != 1 || v.Choices[0].Message.Role != "assistant" ||
		len(strings.Fields(v.Choices[0].Message.Content)) != 3 || v.Usage.Prompt != 5 || v.Usage.Completion != 3 {
		t.Errorf("response %s", out)
	}
}

func TestDecodeChatRequestErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{}`, "messages: field required"},
		{`{"messages":[]}`, "messages: field required"},
		{`{"messages":[{"content":"a"}]}`, "messages[0]: role"},
		{`{"messages":[{"role":"user","content":7}]}`, "messages[0]: content"},
		{`{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, "content[0]"},
		{`{"messages":[{"role":"user","content":"  "}]}`, "prompt is empty"},
		{`{"messages":[{"role":"user","content":"a"}],"max_tokens":0}`, "max_tokens must be at least 1"},
		{`{"messages":[{"role":"user","content":"a"}],"stream_options":{"include_usage":true}}`, "stream=True"},
		{`{"messages":[{"role":"user","content":"a"}]} x`, "data after"},
	} {
		_, err := decodeChatRequest([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.body, err, tc.want)
		}
	}
}

func FuzzDecodeChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi there"}],"max_tokens":4,"min_tokens":4,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`, `{"messages":[{"role":"assistant","content":null}]}`,
		`{"messages":[1]}`, `{"messages":null}`, `[]`, ``, `{"messages":[{"role":"u","content":"a"}],"max_completion_tokens":-3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeChatRequest(body)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != 400 || ae.msg == "" {
				t.Fatalf("error %v is not a 400 apiError", err)
			}
			return
		}
		if len(req.Prompt) == 0 || req.MaxTokens < 0 || req.MinTokens < 0 || (req.MaxTokens > 0 && req.MinTokens > req.MaxTokens) {
			t.Fatalf("accepted an invalid request %+v from %q", req, body)
		}
		if req.IncludeUsage && !req.Stream {
			t.Fatalf("include_usage without stream from %q", body)
		}
	})
}
