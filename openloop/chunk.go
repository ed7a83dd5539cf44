package openloop

import (
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// chunk is what the client needs from one completion stream chunk. It is
// filled by a small JSON scanner that reads only the fields below and skips
// the rest, without allocating. As in encoding/json, a repeated key counts
// by its last occurrence.
type chunk struct {
	// text: choices[0].text (completions), or choices[0].delta.content or
	// .reasoning_content (chat completions), is a non-empty string.
	text bool
	// choices: choices is a non-empty array whose first element is an
	// object — the chunk vLLM's benchmark client times (TTFT, ITL,
	// latency), whatever its text.
	choices bool
	// finish: choices[0].finish_reason when it is a string (nil: null or
	// absent); raw JSON string contents, valid until the next scan.
	finish           []byte
	usage            bool // usage is an object with completion_tokens
	completionTokens int
	prompt           bool // usage.prompt_tokens is a non-negative integer
	promptTokens     int
	cached           bool // usage.prompt_tokens_details.cached_tokens is a non-negative integer
	cachedTokens     int
	isErr            bool   // {"error": ...} or {"object": "error", ...}
	errMsg           []byte // the error's message, raw JSON string contents
}

var (
	errSyntax  = errors.New("JSON syntax")
	errTooDeep = errors.New("JSON nested too deeply")
	errNumber  = errors.New("usage.completion_tokens: not a non-negative integer")
)

// The keys the scanner looks for, as indices (see keyOf).
const (
	kOther = iota
	kChoices
	kUsage
	kError
	kObject
	kMessage
	kText
	kDelta
	kContent
	kReasoning
	kCompletionTokens
	kPromptTokens
	kPromptDetails
	kCachedTokens
	kFinishReason
)

// keyNames is what each key index decodes to.
var keyNames = [...]string{kChoices: "choices", kUsage: "usage", kError: "error", kObject: "object", kMessage: "message",
	kText: "text", kDelta: "delta", kContent: "content", kReasoning: "reasoning_content",
	kCompletionTokens: "completion_tokens", kPromptTokens: "prompt_tokens",
	kPromptDetails: "prompt_tokens_details", kCachedTokens: "cached_tokens", kFinishReason: "finish_reason"}

// keyOf names the raw key (JSON string contents): one of the k constants,
// kOther for any other key. A key without escapes (all of vLLM's) is
// matched by one string switch; one with escapes is decoded by keyIs.
func keyOf(raw []byte) int {
	switch string(raw) {
	case "choices":
		return kChoices
	case "usage":
		return kUsage
	case "error":
		return kError
	case "object":
		return kObject
	case "message":
		return kMessage
	case "text":
		return kText
	case "delta":
		return kDelta
	case "content":
		return kContent
	case "reasoning_content":
		return kReasoning
	case "completion_tokens":
		return kCompletionTokens
	case "prompt_tokens":
		return kPromptTokens
	case "prompt_tokens_details":
		return kPromptDetails
	case "cached_tokens":
		return kCachedTokens
	case "finish_reason":
		return kFinishReason
	}
	if !hasBackslash(raw) {
		return kOther
	}
	for k := kChoices; k < len(keyNames); k++ {
		if keyIs(raw, keyNames[k]) {
			return k
		}
	}
	return kOther
}

// hasBackslash reports whether a short key has an escape (a byte loop, as
// in scanString).
func hasBackslash(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' {
			return true
		}
	}
	return false
}

// scan reads one chunk object.
func (c *chunk) scan(b []byte) error {
	*c = chunk{}
	var errKey, objErr bool // last "error" value non-null; last "object" is "error"
	_, err := scanObject(b, 0, func(key []byte, b []byte, i int) (int, error) {
		switch keyOf(key) {
		case kChoices:
			return c.scanChoices(b, i)
		case kUsage:
			return c.scanUsage(b, i)
		case kError:
			errKey = b[i] != 'n'
			switch b[i] {
			case '"':
				return c.scanMessage(b, i)
			case '{':
				return scanObject(b, i, func(key []byte, b []byte, i int) (int, error) {
					if b[i] == '"' && keyOf(key) == kMessage {
						return c.scanMessage(b, i)
					}
					return skipValue(b, i)
				})
			}
		case kObject:
			objErr = false
			if b[i] == '"' {
				s, e, next, err := scanString(b, i)
				objErr = err == nil && string(b[s:e]) == "error"
				return next, err
			}
		case kMessage:
			if b[i] == '"' {
				return c.scanMessage(b, i)
			}
		}
		return skipValue(b, i)
	})
	c.isErr = errKey || objErr
	return err
}

func (c *chunk) scanMessage(b []byte, i int) (int, error) {
	s, e, next, err := scanString(b, i)
	if err == nil {
		c.errMsg = b[s:e]
	}
	return next, err
}

// scanChoices reads "choices": [ {..."text": "..."...}, ... ].
func (c *chunk) scanChoices(b []byte, i int) (int, error) {
	c.text, c.choices, c.finish = false, false, nil
	if b[i] != '[' {
		return skipValue(b, i)
	}
	i = skipWS(b, i+1)
	if i >= len(b) {
		return i, errSyntax
	}
	if b[i] == ']' {
		return i + 1, nil
	}
	first := true
	for {
		var err error
		if first && b[i] == '{' {
			var text, content, reasoning bool
			c.choices = true
			i, err = scanObject(b, i, func(key []byte, b []byte, i int) (int, error) {
				switch keyOf(key) {
				case kText:
					return scanNonEmpty(b, i, &text)
				case kFinishReason:
					c.finish = nil
					if b[i] == '"' {
						s, e, next, err := scanString(b, i)
						if err == nil {
							c.finish = b[s:e]
						}
						return next, err
					}
				case kDelta:
					content, reasoning = false, false
					if b[i] == '{' {
						return scanObject(b, i, func(key []byte, b []byte, i int) (int, error) {
							switch keyOf(key) {
							case kContent:
								return scanNonEmpty(b, i, &content)
							case kReasoning:
								return scanNonEmpty(b, i, &reasoning)
							}
							return skipValue(b, i)
						})
					}
				}
				return skipValue(b, i)
			})
			c.text = text || content || reasoning
		} else {
			i, err = skipValue(b, i)
		}
		if err != nil {
			return i, err
		}
		first = false
		var end bool
		if i, end, err = afterElem(b, i, ']'); end || err != nil {
			return i, err
		}
	}
}

// scanNonEmpty reads the value at b[i]; *set is whether it is a non-empty
// string.
func scanNonEmpty(b []byte, i int, set *bool) (int, error) {
	*set = false
	if b[i] != '"' {
		return skipValue(b, i)
	}
	s, e, next, err := scanString(b, i)
	*set = err == nil && e > s
	return next, err
}

// scanUsage reads "usage": null | {"completion_tokens": N, "prompt_tokens":
// P, "prompt_tokens_details": {"cached_tokens": C}, ...}. A prompt_tokens
// or cached_tokens that is not a plain non-negative integer is ignored
// (they only refine the input count of text prompts and say how much of
// the prompt the engine's prefix cache held: OpenAI's field, which vLLM
// fills with --enable-prompt-tokens-details and llama.cpp's llama-server
// always, tools/server/server-task.cpp:370 at 80fb11a).
func (c *chunk) scanUsage(b []byte, i int) (int, error) {
	c.usage, c.completionTokens, c.prompt, c.promptTokens = false, 0, false, 0
	c.cached, c.cachedTokens = false, 0
	if b[i] != '{' {
		return skipValue(b, i)
	}
	return scanObject(b, i, func(key []byte, b []byte, i int) (int, error) {
		switch keyOf(key) {
		case kCompletionTokens:
			n, next, ok := scanCount(b, i)
			if !ok {
				return next, errNumber
			}
			c.usage, c.completionTokens = true, n
			return next, nil
		case kPromptTokens:
			n, next, ok := scanCount(b, i)
			if !ok {
				c.prompt = false
				return skipValue(b, i)
			}
			c.prompt, c.promptTokens = true, n
			return next, nil
		case kPromptDetails:
			c.cached, c.cachedTokens = false, 0
			if b[i] != '{' {
				return skipValue(b, i)
			}
			return scanObject(b, i, func(key []byte, b []byte, i int) (int, error) {
				if keyOf(key) != kCachedTokens {
					return skipValue(b, i)
				}
				n, next, ok := scanCount(b, i)
				if !ok {
					c.cached = false
					return skipValue(b, i)
				}
				c.cached, c.cachedTokens = true, n
				return next, nil
			})
		}
		return skipValue(b, i)
	})
}

// scanCount reads a non-negative integer of at most 10 digits at b[i].
func scanCount(b []byte, i int) (n, next int, ok bool) {
	next = i
	for next < len(b) && b[next] >= '0' && b[next] <= '9' && next-i < 10 {
		n = n*10 + int(b[next]-'0')
		next++
	}
	if next == i || (next < len(b) && (b[next] == '.' || b[next] == 'e' || b[next] == 'E' || (b[next] >= '0' && b[next] <= '9'))) {
		return 0, next, false
	}
	return n, next, true
}

// scanObject walks the object starting at b[i] == '{' (after white space),
// calling fn with each key (raw, without quotes) and the index of its value;
// fn returns the index after the value. It returns the index after '}'.
func scanObject(b []byte, i int, fn func(key []byte, b []byte, i int) (int, error)) (int, error) {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '{' {
		return i, errSyntax
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return i, errSyntax
		}
		ks, ke, next, err := scanString(b, i)
		if err != nil {
			return next, err
		}
		i = skipWS(b, next)
		if i >= len(b) || b[i] != ':' {
			return i, errSyntax
		}
		i = skipWS(b, i+1)
		if i >= len(b) {
			return i, errSyntax
		}
		if i, err = fn(b[ks:ke], b, i); err != nil {
			return i, err
		}
		var end bool
		if i, end, err = afterElem(b, i, '}'); end || err != nil {
			return i, err
		}
	}
}

// afterElem reads what follows an array element or object member, from b[i]
// (white space allowed): either ',' and the white space after it, returning
// the index of the next element, or the closing byte, returning the index
// after it and end true.
func afterElem(b []byte, i int, closing byte) (next int, end bool, err error) {
	i = skipWS(b, i)
	if i >= len(b) {
		return i, false, errSyntax
	}
	switch b[i] {
	case ',':
		if i = skipWS(b, i+1); i >= len(b) {
			return i, false, errSyntax
		}
		return i, false, nil
	case closing:
		return i + 1, true, nil
	}
	return i, false, errSyntax
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString reads the string at b[i] == '"' and returns the bounds of its
// contents and the index after the closing quote. A byte loop: the strings
// of a chunk are short, where bytes.IndexByte's setup costs more than it
// saves.
func scanString(b []byte, i int) (start, end, next int, err error) {
	start = i + 1
	for j := start; j < len(b); j++ {
		switch b[j] {
		case '"':
			return start, j, j + 1, nil
		case '\\':
			j++ // skip the escaped byte
		}
	}
	return start, len(b), len(b), errSyntax
}

// maxDepth bounds the nesting skipValue accepts.
const maxDepth = 10000

// skipValue skips the value at b[i] (after white space) and returns the index
// after it. Containers are skipped by counting brackets outside strings.
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return i, errSyntax
	}
	switch b[i] {
	case '"':
		_, _, next, err := scanString(b, i)
		return next, err
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				_, _, next, err := scanString(b, j)
				if err != nil {
					return next, err
				}
				j = next - 1
			case '{', '[':
				depth++
				if depth > maxDepth {
					return j, errTooDeep
				}
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return len(b), errSyntax
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return j, errSyntax
			}
			return j, nil
		}
		j++
	}
	return j, nil
}

// keyIs reports whether the raw JSON string contents raw decode to want,
// without allocating (escapes are decoded on the fly).
func keyIs(raw []byte, want string) bool {
	if len(raw) == len(want) && string(raw) == want {
		return true
	}
	w := 0
	var enc [utf8.UTFMax]byte
	for i := 0; i < len(raw); {
		var r rune
		if raw[i] != '\\' {
			n := 1
			if raw[i] >= utf8.RuneSelf {
				r, n = utf8.DecodeRune(raw[i:])
				if r == utf8.RuneError && n == 1 {
					return false
				}
			}
			if w+n > len(want) || string(raw[i:i+n]) != want[w:w+n] {
				return false
			}
			i += n
			w += n
			continue
		}
		if i+1 >= len(raw) {
			return false
		}
		switch raw[i+1] {
		case '"', '\\', '/':
			r = rune(raw[i+1])
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			var ok bool
			r, i, ok = decodeU(raw, i)
			if !ok {
				return false
			}
			n := utf8.EncodeRune(enc[:], r)
			if w+n > len(want) || string(enc[:n]) != want[w:w+n] {
				return false
			}
			w += n
			continue
		default:
			return false
		}
		if w >= len(want) || want[w] != byte(r) {
			return false
		}
		i += 2
		w++
	}
	return w == len(want)
}

// decodeU decodes \uXXXX (with a following low surrogate where needed) at
// raw[i] and returns the rune and the index after it.
func decodeU(raw []byte, i int) (rune, int, bool) {
	hex4 := func(j int) (rune, bool) {
		if j+6 > len(raw) || raw[j] != '\\' || raw[j+1] != 'u' {
			return 0, false
		}
		var r rune
		for _, c := range raw[j+2 : j+6] {
			switch {
			case c >= '0' && c <= '9':
				r = r<<4 | rune(c-'0')
			case c >= 'a' && c <= 'f':
				r = r<<4 | rune(c-'a'+10)
			case c >= 'A' && c <= 'F':
				r = r<<4 | rune(c-'A'+10)
			default:
				return 0, false
			}
		}
		return r, true
	}
	r, ok := hex4(i)
	if !ok {
		return 0, i, false
	}
	i += 6
	if utf16.IsSurrogate(r) {
		if r2, ok2 := hex4(i); ok2 {
			if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
				return d, i + 6, true
			}
		}
		return utf8.RuneError, i, true
	}
	return r, i, true
}
