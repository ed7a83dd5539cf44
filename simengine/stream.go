package simengine

import (
	"strconv"
	"sync"
)

// vocab is the sim's output vocabulary; a generated token is " " + a word.
var vocab = []string{
	"the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
	"not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
	"token", "engine", "step", "batch", "cache", "block", "prefill", "decode", "kernel", "tensor", "model", "queue", "latency", "memory", "simulated", "sim",
	"fn", "return", "if", "else", "for", "range", "struct", "func", "var", "let", "def", "class", "import", "{", "}", ";",
}

// vocabJSON holds each token's text as a JSON string literal, with the leading
// space; index len(vocab) is the empty text of a pseudo-EOS.
var vocabJSON = func() []string {
	out := make([]string, len(vocab)+1)
	for i, w := range vocab {
		out[i] = strconv.Quote(" " + w) // ASCII words: Go and JSON quoting agree
	}
	out[len(vocab)] = `""`
	return out
}()

// tokenEvent is one generated token: a vocab index (-1 for pseudo-EOS) and
// the finish reason on the last token ("length" or "stop").
type tokenEvent struct {
	word   int
	finish string
}

func (ev tokenEvent) text() string {
	if ev.word < 0 {
		return ""
	}
	return " " + vocab[ev.word]
}

func (ev tokenEvent) textJSON() string {
	if ev.word < 0 {
		return vocabJSON[len(vocab)]
	}
	return vocabJSON[ev.word]
}

// tokenStream carries tokens from the step loop to one request's handler
// without ever blocking the loop: pushes append under a small mutex and post a
// non-blocking notification.
type tokenStream struct {
	mu      sync.Mutex
	pending []tokenEvent
	done    bool  // the last token (with a finish reason) was pushed
	err     error // the engine stopped before the request finished
	notify  chan struct{}
}

func newTokenStream() *tokenStream { return &tokenStream{notify: make(chan struct{}, 1)} }

func (t *tokenStream) push(ev tokenEvent) {
	t.mu.Lock()
	t.pending = append(t.pending, ev)
	t.done = t.done || ev.finish != ""
	t.mu.Unlock()
	notify(t.notify)
}

func (t *tokenStream) fail(err error) {
	t.mu.Lock()
	if !t.done && t.err == nil {
		t.err = err
	}
	t.mu.Unlock()
	notify(t.notify)
}

// take moves the pending tokens into buf and reports whether the stream has
// ended (done) or failed.
func (t *tokenStream) take(buf []tokenEvent) ([]tokenEvent, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	buf = append(buf[:0], t.pending...)
	t.pending = t.pending[:0]
	return buf, t.done, t.err
}
