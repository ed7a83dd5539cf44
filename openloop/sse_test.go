package openloop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// chunkLine is a vLLM-shaped content chunk.
func chunkLine(text string) string {
	return `data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":` +
		jsonQuote(text) + `,"logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}` + "\n\n"
}

const usageLine = `data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}` + "\n\n"

func jsonQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

func readEvents(t *testing.T, r io.Reader) ([]string, error) {
	t.Helper()
	s := newSSEReader(r)
	var out []string
	for {
		d, err := s.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, string(d))
	}
}

func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 40<<10)
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"plain", "data: a\n\ndata: b\n\n", []string{"a", "b"}},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}},
		{"comments and fields", ": ping\n\nevent: x\nid: 3\nretry: 10\ndata: a\n\n", []string{"a"}},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"a\nb"}},
		{"no space", "data:a\n\n", []string{"a"}},
		{"no trailing blank line", "data: a\n\ndata: b", []string{"a", "b"}},
		{"blank lines only", "\n\n\r\n", nil},
		{"long line", "data: " + long + "\n\ndata: z\n\n", []string{long, "z"}},
		{"field without colon", "data\n\n", []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in)), iotest.HalfReader(strings.NewReader(tc.in))} {
				got, err := readEvents(t, r)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
					t.Fatalf("events %q, want %q", got, tc.want)
				}
			}
		})
	}
}

func TestConsume(t *testing.T) {
	three := chunkLine("a") + chunkLine("") + chunkLine("b") + chunkLine("c")
	for _, tc := range []struct {
		name          string
		in            string
		chunks, usage int
		haveUsage     bool
		err           string
	}{
		{"ok", three + usageLine + "data: [DONE]\n\n", 3, 3, true, ""},
		{"ok crlf split", strings.ReplaceAll(three+usageLine+"data: [DONE]\n\n", "\n", "\r\n"), 3, 3, true, ""},
		{"no usage", three + "data: [DONE]\n\n", 3, 0, false, ""},
		{"premature EOF", three, 3, 0, false, "stream ended before [DONE] after 3 content chunks"},
		{"EOF mid event", three + `data: {"choices":[{"te`, 3, 0, false, "malformed stream chunk"},
		{"error object", chunkLine("a") + `data: {"error":{"object":"error","message":"boom","code":500}}` + "\n\n", 1, 0, false, "stream error: boom"},
		{"error top-level", `data: {"object":"error","message":"too long","type":"BadRequestError"}` + "\n\n", 0, 0, false, "stream error: too long"},
		{"not json", "data: hello\n\n", 0, 0, false, "malformed stream chunk"},
		{"usage first then text", usageLine + chunkLine("x") + "data: [DONE]\n\n", 1, 3, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st streamState
			tick := int64(0)
			err := st.consume(newSSEReader(iotest.HalfReader(strings.NewReader(tc.in))), func() int64 { tick += 10; return tick })
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			if st.chunks != tc.chunks || st.usageOut != tc.usage || st.haveUsage != tc.haveUsage {
				t.Errorf("chunks %d usage %d/%v, want %d %d/%v", st.chunks, st.usageOut, st.haveUsage, tc.chunks, tc.usage, tc.haveUsage)
			}
			if st.choices > 0 && (st.firstNs == 0 || st.lastNs < st.firstNs || len(st.itlMs()) != st.choices-1) {
				t.Errorf("times first %d last %d itl %v", st.firstNs, st.lastNs, st.itlMs())
			}
		})
	}
}

func TestScanChunk(t *testing.T) {
	for _, tc := range []struct {
		in           string
		text, usage  bool
		ct           int
		pt           int // usage.prompt_tokens; 0 = not checked, -1 = must be absent
		cached       int // usage.prompt_tokens_details.cached_tokens + 1; 0 = must be absent
		isErr        bool
		msg, errPart string
	}{
		{in: `{"choices":[{"text":"hi"}]}`, text: true},
		{in: `{"choices":[{"text":""}]}`},
		{in: `{"choices":[{"text":"\"}"}], "usage":null}`, text: true},
		{in: `{"choices":[{"index":0,"te\u0078t":"a"}]}`, text: true},
		{in: `{"choices":[{"text":""},{"text":"x"}]}`},
		{in: `{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`},
		{in: `{"choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}`, text: true},
		{in: `{"choices":[{"delta":{"reasoning_content":"hm","content":null}}]}`, text: true},
		{in: `{"choices":[{"delta":{"content":"a"},"delta":null}]}`},
		{in: `{"choices":[{"delta":"x"}]}`},
		{in: `{"choices":[],"usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3}}`, usage: true, ct: 3, pt: 12},
		{in: `{"usage":{"prompt_tokens":-4,"completion_tokens":3}}`, usage: true, ct: 3, pt: -1},
		{in: `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":256}}`, usage: true, ct: 256},
		{in: ` { "usage" : { "completion_tokens" : 7 } } `, usage: true, ct: 7},
		// llama.cpp's llama-server's last chunk (80fb11a, server-task.cpp:370).
		{in: `{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"usage":{"completion_tokens":8,"prompt_tokens":5,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":4}},"timings":{"cache_n":4}}`,
			usage: true, ct: 8, pt: 5, cached: 5},
		{in: `{"usage":{"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}}`, usage: true, ct: 1, cached: 1},
		{in: `{"usage":{"completion_tokens":1,"prompt_tokens_details":null}}`, usage: true, ct: 1},
		{in: `{"usage":{"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":-2}}}`, usage: true, ct: 1},
		{in: `{"usage":{"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":3},"prompt_tokens_details":{}}}`, usage: true, ct: 1},
		{in: `{"usage":{"prompt_tokens_details":{"audio_tokens":2,"cached_tokens":9},"completion_tokens":1}}`, usage: true, ct: 1, cached: 10},
		{in: `{"usage":{"completion_tokens":-1}}`, errPart: "completion_tokens"},
		{in: `{"usage":{"completion_tokens":1.5}}`, errPart: "completion_tokens"},
		{in: `{"error":{"message":"m"}}`, isErr: true, msg: "m"},
		{in: `{"error":null,"choices":[{"text":"a"}]}`, text: true},
		{in: `{"object":"error","message":"x"}`, isErr: true, msg: "x"},
		{in: `{"nested":{"a":[1,{"b":"]}"}],"c":true},"choices":[{"text":"z"}]}`, text: true},
		{in: `{"choices":[{"text":"a"}]`, errPart: "syntax"},
		{in: `[1,2]`, errPart: "syntax"},
		{in: ``, errPart: "syntax"},
	} {
		var c chunk
		err := c.scan([]byte(tc.in))
		if tc.errPart != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errPart) {
				t.Errorf("%s: err %v, want %q", tc.in, err, tc.errPart)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if c.text != tc.text || c.usage != tc.usage || c.completionTokens != tc.ct || c.isErr != tc.isErr || string(c.errMsg) != tc.msg {
			t.Errorf("%s: got %+v", tc.in, c)
		}
		if (tc.pt > 0 && (!c.prompt || c.promptTokens != tc.pt)) || (tc.pt < 0 && c.prompt) {
			t.Errorf("%s: prompt tokens %t %d, want %d", tc.in, c.prompt, c.promptTokens, tc.pt)
		}
		if c.cached != (tc.cached > 0) || (c.cached && c.cachedTokens != tc.cached-1) {
			t.Errorf("%s: cached tokens %t %d, want %d", tc.in, c.cached, c.cachedTokens, tc.cached-1)
		}
	}
}

// refChunk decodes a chunk with encoding/json, for comparison.
func refChunk(b []byte) (c chunk, ok bool) {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return c, false
	}
	if arr, ok := m["choices"].([]any); ok && len(arr) > 0 {
		if o, ok := arr[0].(map[string]any); ok {
			nonEmpty := func(v any) bool { s, ok := v.(string); return ok && s != "" }
			c.text = nonEmpty(o["text"])
			if d, ok := o["delta"].(map[string]any); ok {
				c.text = c.text || nonEmpty(d["content"]) || nonEmpty(d["reasoning_content"])
			}
		}
	}
	if u, ok := m["usage"].(map[string]any); ok {
		if v, ok := u["completion_tokens"].(float64); ok {
			c.usage, c.completionTokens = true, int(v)
		}
		if v, ok := u["prompt_tokens"].(float64); ok {
			c.prompt, c.promptTokens = true, int(v)
		}
		if d, ok := u["prompt_tokens_details"].(map[string]any); ok {
			if v, ok := d["cached_tokens"].(float64); ok {
				c.cached, c.cachedTokens = true, int(v)
			}
		}
	}
	c.isErr = m["error"] != nil || m["object"] == "error"
	return c, true
}

func FuzzScanChunk(f *testing.F) {
	for _, s := range []string{`{"choices":[{"text":"hi"}],"usage":null}`, `{"choices":[],"usage":{"completion_tokens":3}}`,
		`{"error":{"message":"m"}}`, `{"object":"error"}`, `{"choices":[{"te\u0078t":"a"}]}`, `{"a":[{"b":"]"}]}`,
		`{"choices":[{"index":0,"delta":{"content":" x"},"finish_reason":null}]}`, `{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3}}`,
		`{"usage":{"completion_tokens":8,"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c chunk
		err := c.scan(b)
		if err != nil || !json.Valid(b) {
			return
		}
		ref, ok := refChunk(b)
		if !ok {
			return
		}
		if c.text != ref.text || c.usage != ref.usage || c.completionTokens != ref.completionTokens || c.isErr != ref.isErr {
			t.Fatalf("%q: scanner %+v, encoding/json %+v", b, c, ref)
		}
		if c.prompt && (!ref.prompt || ref.promptTokens != c.promptTokens) {
			t.Fatalf("%q: scanner prompt_tokens %d, encoding/json %+v", b, c.promptTokens, ref)
		}
		if c.cached && (!ref.cached || ref.cachedTokens != c.cachedTokens) {
			t.Fatalf("%q: scanner cached_tokens %d, encoding/json %+v", b, c.cachedTokens, ref)
		}
	})
}

func FuzzSSEParse(f *testing.F) {
	f.Add([]byte(chunkLine("a") + chunkLine("b") + usageLine + "data: [DONE]\n\n"))
	f.Add([]byte(": c\r\ndata: {\"choices\":[{\"text\":\"x\"}]}\r\n\r\ndata: [DONE]"))
	f.Add([]byte("data: {\"error\":{\"message\":\"e\"}}\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var st streamState
		tick := int64(0)
		err := st.consume(newSSEReader(bytes.NewReader(b)), func() int64 { tick++; return tick })
		if err == nil && !bytes.Contains(b, []byte("[DONE]")) {
			t.Fatal("nil error without [DONE]")
		}
		// Every chunk with choices is timed (the end is the last of them,
		// as vLLM's client has it), content or not; content chunks are
		// among them.
		if len(st.times) != st.choices || st.chunks > st.choices || st.choices > 0 && st.lastNs < st.firstNs {
			t.Fatalf("inconsistent state %+v", st)
		}
	})
}

// cycleReader repeats one chunk forever.
type cycleReader struct {
	b   []byte
	pos int
}

func (c *cycleReader) Read(p []byte) (int, error) {
	n := copy(p, c.b[c.pos:])
	c.pos = (c.pos + n) % len(c.b)
	return n, nil
}

// BenchmarkSSEParse measures one content chunk through the SSE reader and
// the chunk scanner: allocs/op is allocations per chunk.
func BenchmarkSSEParse(b *testing.B) {
	line := []byte(chunkLine(" token"))
	s := newSSEReader(&cycleReader{b: line})
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	var c chunk
	for b.Loop() {
		d, err := s.next()
		if err != nil {
			b.Fatal(err)
		}
		if err := c.scan(d); err != nil || !c.text {
			b.Fatal(err)
		}
	}
}

// TestKeyOfNames: every name keyOf knows maps to its index, written plainly
// (the switch) and with an escape (keyIs over keyNames), so the two lists
// cannot drift apart.
func TestKeyOfNames(t *testing.T) {
	for k := kChoices; k < len(keyNames); k++ {
		name := keyNames[k]
		escaped := fmt.Sprintf(`\u%04x`, name[0]) + name[1:]
		if got := keyOf([]byte(name)); got != k {
			t.Errorf("keyOf(%q) = %d, want %d", name, got, k)
		}
		if got := keyOf([]byte(escaped)); got != k {
			t.Errorf("keyOf(%q) = %d, want %d", escaped, got, k)
		}
	}
	if got := keyOf([]byte("id")); got != kOther {
		t.Errorf(`keyOf("id") = %d, want kOther`, got)
	}
}

// refEvents is the SSE data events of b by the specification's rules (data
// fields joined by "\n", an event ends at a blank line or at the end),
// for the differential fuzz test below.
func refEvents(b []byte) [][]byte {
	var out [][]byte
	var data []byte
	have := false
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	for _, l := range lines {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if len(l) == 0 {
			if have {
				out = append(out, data)
			}
			data, have = nil, false
			continue
		}
		if l[0] == ':' {
			continue
		}
		field, value := l, []byte(nil)
		if i := bytes.IndexByte(l, ':'); i >= 0 {
			field, value = l[:i], bytes.TrimPrefix(l[i+1:], []byte(" "))
		}
		if string(field) != "data" {
			continue
		}
		if have {
			data = append(data, '\n')
		}
		data = append(append([]byte{}, data...), value...)
		have = true
	}
	if have {
		out = append(out, data)
	}
	return out
}

// hinted is a reader that claims a pending size, as an h1Body does.
type hinted struct {
	io.Reader
	p int64
}

func (h hinted) pending() int64 { return h.p }

// FuzzSSEEvents: with a 16-byte read buffer, so that most lines are long
// ones gathered (and events kept in place, buffers swapped), and a budget
// that reuses buffers across streams, the reader gives the events the
// specification's rules give, stream after stream on one reader.
func FuzzSSEEvents(f *testing.F) {
	f.Add([]byte("data: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\ndata: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n\ndata: c\n\n"), uint8(7))
	f.Add([]byte(": comment that is long enough\r\ndata:x\r\ndata: yyyyyyyyyyyyyyyyyyyyyyyyyyyy\r\n\r\n"), uint8(200))
	f.Add([]byte("data: short\ndata: then a very long second line of data\n\n"), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, hint uint8) {
		if len(b) > 4096 || bytes.Contains(b, []byte("\r\r")) || bytes.Count(b, []byte("\r")) != bytes.Count(b, []byte("\r\n")) {
			return // lone CRs: line endings the reader does not treat as such
		}
		budget := &memBudget{limit: 1 << 30}
		s := newSSEReader(nil)
		s.br = bufio.NewReaderSize(nil, 16)
		for range 2 {
			s.reset(hinted{bytes.NewReader(b), int64(hint)}, budget)
			var got [][]byte
			for {
				d, err := s.next()
				if err != nil {
					break
				}
				got = append(got, append([]byte{}, d...))
			}
			want := refEvents(b)
			if len(got) != len(want) {
				t.Fatalf("%q: %d events %q, want %d %q", b, len(got), got, len(want), want)
			}
			for i := range got {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("%q: event %d %q, want %q", b, i, got[i], want[i])
				}
			}
		}
	})
}

// TestSSEEventsLarge: random streams with lines up to 300 KiB (past sseKeep,
// so buffers come from the budget and are reused across streams), events
// of several data lines, comments and CRLF endings, read on one reader with
// a hinted body: the events the specification's rules give, and no buffer
// left in use between streams.
func TestSSEEventsLarge(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	budget := &memBudget{limit: 64 << 20}
	s := newSSEReader(nil)
	for n := range 30 {
		var b bytes.Buffer
		for range 1 + rng.IntN(4) {
			for k := range 1 + rng.IntN(3) {
				if rng.IntN(4) == 0 {
					b.WriteString(": " + strings.Repeat("c", rng.IntN(100_000)) + "\n")
				}
				eol := "\n"
				if rng.IntN(2) == 0 {
					eol = "\r\n"
				}
				b.WriteString("data: " + strings.Repeat(string(rune('a'+k)), rng.IntN(300_000)) + eol)
			}
			b.WriteString("\n")
		}
		in := b.Bytes()
		s.reset(hinted{bytes.NewReader(in), int64(rng.IntN(len(in)))}, budget)
		var got [][]byte
		for {
			d, err := s.next()
			if err != nil {
				break
			}
			got = append(got, append([]byte{}, d...))
		}
		want := refEvents(in)
		if len(got) != len(want) {
			t.Fatalf("stream %d: %d events, want %d", n, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("stream %d event %d: %d bytes, want %d", n, i, len(got[i]), len(want[i]))
			}
		}
		s.reset(nil, nil)
		if u := budget.inUse(); u != 0 || budget.peak.Load() > budget.limit {
			t.Fatalf("stream %d: %d bytes in use after the stream, peak %d", n, u, budget.peak.Load())
		}
	}
	t.Logf("budget peak %.1f MiB, %d idle buffers (%.1f MiB)", float64(budget.peak.Load())/(1<<20), len(budget.free), float64(budget.idle)/(1<<20))
}

// TestConsumeTimesNeverGoBack: a clock that steps back (two conversions of
// kernel receive times a few ns apart) never makes a chunk earlier than the
// response head or than the chunk before it.
func TestConsumeTimesNeverGoBack(t *testing.T) {
	ticks := []int64{100, 130, 125, 140, 139, 150}
	i := 0
	var st streamState
	st.reset(120)
	in := chunkLine("a") + chunkLine("b") + chunkLine("c") + chunkLine("d") + usageLine + "data: [DONE]\n\n"
	if err := st.consume(newSSEReader(strings.NewReader(in)), func() int64 { i++; return ticks[min(i-1, len(ticks)-1)] }); err != nil {
		t.Fatal(err)
	}
	want := []int64{120, 130, 130, 140}
	if !reflect.DeepEqual(st.times, want) || st.firstNs != 120 || st.lastNs != 140 {
		t.Errorf("times %v (first %d last %d), want %v", st.times, st.firstNs, st.lastNs, want)
	}
}

// inUse is the counted capacity held by requests (not idle).
func (b *memBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used.Load() - b.idle
}
