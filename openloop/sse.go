package openloop

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// sseReader splits a server-sent-events stream into events. It handles CRLF
// line endings, comments (":" lines), fields other than data (ignored),
// multi-line data and events split across reads. Once its buffers have grown
// to the stream's line and event sizes it allocates nothing.
type sseReader struct {
	br   *bufio.Reader
	hint sizeHinter // the body, when it knows how much of it is already on its way
	line []byte     // long lines that do not fit br's buffer
	buf  []byte     // an event's data, when it has to be assembled or kept
	data []byte     // the current event's data (in buf, or in br's buffer)
	// budget counts the buffers beyond sseKeep (see memBudget); nil: none.
	budget *memBudget
}

// sizeHinter is a body that knows how many of its bytes are already framed
// (the rest of the current chunk, or of a Content-Length body): a line that
// outgrows the reader's buffer is given room for that much at once, not
// doubled up to it (h1Body).
type sizeHinter interface{ pending() int64 }

// maxSSELine bounds one line, so a broken server cannot exhaust memory.
const maxSSELine = 16 << 20

// sseKeep is the buffer capacity a reader keeps between requests without
// charging it to a budget.
const sseKeep = 64 << 10

var errLineTooLong = fmt.Errorf("%w: an SSE line longer than 16 MiB", errTooLarge)

func newSSEReader(r io.Reader) *sseReader {
	s := &sseReader{br: bufio.NewReaderSize(r, 16<<10), buf: make([]byte, 0, 1024)}
	s.hint, _ = r.(sizeHinter)
	return s
}

// reset reads r next, counting buffer growth beyond sseKeep against b (may
// be nil). Buffers that grew beyond sseKeep go back to the previous
// budget, for the next request that needs one.
func (s *sseReader) reset(r io.Reader, b *memBudget) {
	s.br.Reset(r)
	s.hint, _ = r.(sizeHinter)
	if cap(s.line) > sseKeep {
		s.drop(s.line)
		s.line = nil
	}
	if cap(s.buf) > sseKeep {
		s.drop(s.buf)
		s.buf = make([]byte, 0, 1024)
	}
	s.budget = b
	s.line, s.buf, s.data = s.line[:0], s.buf[:0], nil
}

// drop is done with a buffer: one beyond sseKeep goes back to the budget.
func (s *sseReader) drop(buf []byte) {
	if cap(buf) > sseKeep && s.budget != nil {
		s.budget.put(buf)
	}
}

// grow makes room for n more bytes in *buf, at least want in all: doubling
// (to the line cap), with buffers beyond sseKeep taken from the budget
// (sizes rounded up to eighths of a power of two, so that buffers fit the
// next request of about the same size); it fails when the budget cannot
// hold the new buffer. The buffer grown from is dropped, uncounted, once
// copied: a step of a doubling is of no use to another request.
func (s *sseReader) grow(buf *[]byte, n, want int) error {
	need := len(*buf) + n
	if need <= cap(*buf) {
		return nil
	}
	newCap := max(min(2*cap(*buf), maxSSELine), need, min(want, maxSSELine))
	var nb []byte
	switch {
	case newCap <= sseKeep || s.budget == nil:
		nb = make([]byte, 0, newCap)
	default:
		if nb = s.budget.get(max(min(sizeClass(newCap), maxSSELine), newCap)); nb == nil {
			return fmt.Errorf("%w: the run's %d MiB for buffered stream lines is in use by other requests", errTooLarge, s.budget.limit>>20)
		}
	}
	nb = append(nb, *buf...)
	if cap(*buf) > sseKeep && s.budget != nil {
		s.budget.used.Add(-int64(cap(*buf)))
	}
	*buf = nb
	return nil
}

// sizeClass rounds n up to a multiple of an eighth of its power of two.
func sizeClass(n int) int {
	step := 1 << max(bits.Len(uint(n))-4, 0)
	return (n + step - 1) / step * step
}

// errTooLarge marks a stream whose lines would exceed the memory allowed.
var errTooLarge = errors.New("stream too large")

// next returns the data of the next event. The slice is valid until the
// following call. At the end of the stream it returns io.EOF (an event cut
// off by the end, with no blank line after it, is still returned first).
// A one-line event read into s.line is returned in place (the buffers swap
// roles), not copied: a 15 MB line then holds 15 MB, not 30.
func (s *sseReader) next() ([]byte, error) {
	s.buf = s.buf[:0]
	s.data = nil
	have := false
	for {
		line, long, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && have {
				return s.data, nil
			}
			return nil, err
		}
		if len(line) == 0 {
			if have {
				return s.data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		if string(field) != "data" {
			continue
		}
		switch {
		case !have && long: // keep the line's buffer as the event's
			s.buf, s.line = s.line, s.buf[:0]
			s.data = value
		case !have: // a short line lives in br's buffer: copy it out
			if err := s.grow(&s.buf, len(value), 0); err != nil {
				return nil, err
			}
			s.buf = append(s.buf, value...)
			s.data = s.buf
		default:
			if len(s.data)+1+len(value) > maxSSELine {
				return nil, errLineTooLong
			}
			if len(s.data) > 0 && (len(s.buf) == 0 || &s.data[0] != &s.buf[0]) { // data in place: to buf's front
				s.buf = append(s.buf[:0], s.data...)
			}
			if err := s.grow(&s.buf, 1+len(value), 0); err != nil {
				return nil, err
			}
			s.buf = append(append(s.buf, '\n'), value...)
			s.data = s.buf
		}
		have = true
	}
}

// readLine returns the next line without its line ending, and whether it
// was gathered in s.line (long) rather than lying in br's buffer. A last
// line without a newline is returned before io.EOF. Lines longer than br's
// buffer are gathered in s.line, whose growth is counted against the
// budget.
func (s *sseReader) readLine() ([]byte, bool, error) {
	b, err := s.br.ReadSlice('\n')
	if err == nil {
		return trimEOL(b), false, nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if len(b) > 0 && errors.Is(err, io.EOF) {
			return trimEOL(b), false, nil
		}
		return nil, false, err
	}
	s.line = s.line[:0]
	want := 0
	if s.hint != nil {
		if p := s.hint.pending(); p > 0 {
			want = len(b) + s.br.Buffered() + int(min(p, maxSSELine))
		}
	}
	for {
		if len(s.line)+len(b) > maxSSELine {
			return nil, false, errLineTooLong
		}
		if gerr := s.grow(&s.line, len(b), want); gerr != nil {
			return nil, false, gerr
		}
		s.line = append(s.line, b...)
		switch {
		case err == nil, errors.Is(err, io.EOF) && len(s.line) > 0:
			return trimEOL(s.line), true, nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, false, err
		}
		b, err = s.br.ReadSlice('\n')
	}
}

func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

// streamState accumulates what a completion stream tells about one request.
type streamState struct {
	// firstNs and lastNs are the arrivals of the first and the last chunk
	// that carried choices, whatever their text: the events vLLM's
	// benchmark client times (see TTFT).
	firstNs, lastNs int64
	choices         int     // chunks that carried choices
	chunks          int     // content chunks (non-empty choices[0].text or .delta.content)
	times           []int64 // arrival of every chunk that carried choices, for ITL
	finish          string  // the last finish_reason the stream gave ("" if none)
	usageOut        int
	haveUsage       bool
	usagePrompt     int    // usage.prompt_tokens
	havePrompt      bool   // the usage chunk gave prompt_tokens
	usageCached     int    // usage.prompt_tokens_details.cached_tokens
	haveCached      bool   // the usage chunk gave cached_tokens
	onFirst         func() // called at the first chunk with choices, if set
	// floorNs: no time of the stream reads earlier (the response head's;
	// then each event's). Two clock readings converted from the kernel's
	// receive times can be nanoseconds out of order.
	floorNs int64
}

func (st *streamState) reset(floorNs int64) {
	*st = streamState{times: st.times[:0], floorNs: floorNs}
}

// errStream is an error reported by the server inside the stream.
type errStream struct{ msg string }

func (e *errStream) Error() string { return "stream error: " + e.msg }

// consume reads the stream to [DONE] and fills st; now returns the current
// time in ns since the run's start. It returns nil only when the stream ended
// with [DONE] and reported no error. It allocates nothing per chunk once the
// buffers in s and st.times have grown.
func (st *streamState) consume(s *sseReader, now func() int64) error {
	for {
		data, err := s.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("%w after %d content chunks", errIncompleteStream, st.chunks)
			}
			return err
		}
		t := max(now(), st.floorNs)
		st.floorNs = t
		if string(bytes.TrimSpace(data)) == "[DONE]" {
			return nil
		}
		var c chunk
		if err := c.scan(data); err != nil {
			return fmt.Errorf("%w %.80q: %w", errMalformed, data, err)
		}
		if c.isErr {
			return &errStream{msg: string(c.errMsg)}
		}
		if c.choices {
			if st.choices == 0 {
				st.firstNs = t
				if st.onFirst != nil {
					st.onFirst()
				}
			}
			st.lastNs = t
			st.choices++
			st.times = append(st.times, t)
			if c.finish != nil {
				st.finish = finishReason(c.finish)
			}
		}
		if c.text {
			st.chunks++
		}
		if c.usage {
			st.usageOut, st.haveUsage = c.completionTokens, true
		}
		if c.prompt {
			st.usagePrompt, st.havePrompt = c.promptTokens, true
		}
		if c.cached {
			st.usageCached, st.haveCached = c.cachedTokens, true
		}
	}
}

// finishReason is a finish_reason's raw JSON string contents as a string,
// without allocating for the two reasons every engine gives.
func finishReason(raw []byte) string {
	switch string(raw) {
	case FinishStop:
		return FinishStop
	case FinishLength:
		return FinishLength
	}
	if len(raw) > 64 {
		raw = raw[:64]
	}
	return string(raw)
}

// itlMs returns the gaps between consecutive chunks with choices in ms.
func (st *streamState) itlMs() []float64 {
	if len(st.times) < 2 {
		return []float64{}
	}
	out := make([]float64, len(st.times)-1)
	for i := 1; i < len(st.times); i++ {
		out[i-1] = float64(st.times[i]-st.times[i-1]) / 1e6
	}
	return out
}
