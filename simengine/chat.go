package simengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The chat endpoint, POST /v1/chat/completions. Its stream follows vLLM's
// chat_completion_stream_generator (vllm/entrypoints/openai/chat_completion/
// serving.py:505-1272 at vLLM commit b36adfa3, in 0.18.1; read for
// reference, not copied): a first chunk
// with delta {"role":"assistant","content":""} sent with the engine's first
// output, then one "chat.completion.chunk" per token whose
// choices[0].delta.content is the token's text (logprobs null,
// finish_reason null; the last one with finish_reason and stop_reason),
// then, with stream_options.include_usage, a chunk with "choices": [] and
// the usage, then [DONE]. Every chunk repeats id ("chatcmpl-…"), object,
// created and model.
//
// The sim applies no chat template: the prompt is the messages' contents
// joined by spaces and tokenized as a text prompt of /v1/completions (one
// token per word), so a chat request and a completion request of the same
// words cost the same and report the same usage.

type rawChatRequest struct {
	Messages            []json.RawMessage `json:"messages"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	rawCommon
}

type chatMessage struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
}

// decodeChatRequest parses and validates a /v1/chat/completions body for the
// fields the sim uses. MaxTokens is 0 when neither max_tokens nor
// max_completion_tokens is set (vLLM then allows the rest of the context).
// Errors are 400 apiErrors.
func decodeChatRequest(body []byte) (*completionRequest, error) {
	var raw rawChatRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		return nil, badRequest("invalid JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, badRequest("invalid JSON body: data after the request object")
	}
	if len(raw.Messages) == 0 {
		return nil, badRequest("messages: field required (a non-empty list of {role, content})")
	}
	var text strings.Builder
	for i, m := range raw.Messages {
		s, err := messageText(m)
		if err != nil {
			return nil, badRequest("messages[%d]: %v", i, err)
		}
		text.WriteString(s)
		text.WriteByte(' ')
	}
	req := &completionRequest{Prompt: tokenize(text.String())}
	if len(req.Prompt) == 0 {
		return nil, badRequest("messages: the prompt is empty")
	}
	switch {
	case raw.MaxCompletionTokens != nil:
		req.MaxTokens = *raw.MaxCompletionTokens
	case raw.MaxTokens != nil:
		req.MaxTokens = *raw.MaxTokens
	}
	if (raw.MaxTokens != nil || raw.MaxCompletionTokens != nil) && req.MaxTokens < 1 {
		return nil, badRequest("max_tokens must be at least 1, got %d.", req.MaxTokens)
	}
	if err := raw.apply(req); err != nil {
		return nil, err
	}
	return req, nil
}

// messageText is the text of one message: its content string, or the text
// parts of a content list ([{"type":"text","text":...}]).
func messageText(m json.RawMessage) (string, error) {
	var msg chatMessage
	if err := json.Unmarshal(m, &msg); err != nil {
		return "", errors.New("must be an object {role, content}")
	}
	if msg.Role == nil || *msg.Role == "" {
		return "", errors.New("role: field required")
	}
	c := bytes.TrimSpace(msg.Content)
	if len(c) == 0 || string(c) == "null" {
		return "", nil // an assistant message with tool calls only
	}
	var s string
	if err := json.Unmarshal(c, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return "", errors.New("content: must be a string or a list of content parts")
	}
	var b strings.Builder
	for k, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", fmt.Errorf("content[%d]: the simulated engine takes text parts only ({type: text, text})", k)
		}
		b.WriteString(*p.Text)
		b.WriteByte(' ')
	}
	return b.String(), nil
}
