package openloop

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// sseReader splits a server-sent-events stream into events. It handles CRLF
// line endings, comments (":" lines), fields other than data (ignored),
// multi-line data and events split across reads. Once its buffers have grown
// to the stream's line and event sizes it allocates nothing.
type sseReader struct {
	br     *bufio.Reader
	line   []byte // long lines that do not fit br's buffer
	data   []byte // the current event's data
	budget *memBudget
	held   int64 // bytes of line and data charged to budget
}

// maxSSELine bounds one line, so a broken server cannot exhaust memory.
const maxSSELine = 16 << 20

// sseKeep is the buffer capacity a reader keeps between requests without
// charging it to a budget.
const sseKeep = 64 << 10

var errLineTooLong = fmt.Errorf("%w: an SSE line longer than 16 MiB", errTooLarge)

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 16<<10), data: make([]byte, 0, 1024)}
}

// reset reads r next, charging buffer growth beyond sseKeep to b (may be
// nil). Buffers that grew beyond sseKeep are dropped and their charge
// returned.
func (s *sseReader) reset(r io.Reader, b *memBudget) {
	s.br.Reset(r)
	if cap(s.line) > sseKeep {
		s.line = nil
	}
	if cap(s.data) > sseKeep {
		s.data = make([]byte, 0, 1024)
	}
	if s.budget != nil {
		s.budget.release(s.held)
	}
	s.budget, s.held = b, 0
	s.line = s.line[:0]
	s.data = s.data[:0]
}

// grow makes room for n more bytes in *buf, charging capacity beyond sseKeep
// (over both buffers) to the budget; it fails when the budget is spent.
func (s *sseReader) grow(buf *[]byte, n int) error {
	if len(*buf)+n <= cap(*buf) {
		return nil
	}
	newCap := max(min(2*cap(*buf), maxSSELine), len(*buf)+n) // doubling, but not past the line cap
	if s.budget != nil {
		over := int64(newCap+cap(s.line)+cap(s.data)-cap(*buf)) - sseKeep
		if need := over - s.held; need > 0 {
			if !s.budget.take(need) {
				return fmt.Errorf("%w: the run's %d MiB for buffered stream lines is in use by other requests", errTooLarge, s.budget.limit>>20)
			}
			s.held += need
		}
	}
	nb := make([]byte, len(*buf), newCap)
	copy(nb, *buf)
	*buf = nb
	return nil
}

// errTooLarge marks a stream whose lines would exceed the memory allowed.
var errTooLarge = errors.New("stream too large")

// memBudget caps the memory that all in-flight requests of a run may hold in
// grown stream buffers.
type memBudget struct {
	limit int64
	used  atomic.Int64
	peak  atomic.Int64
}

// DefaultStreamMemory is the default Config.StreamMemory.
const DefaultStreamMemory = 256 << 20

func (b *memBudget) take(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			for p := b.peak.Load(); u+n > p && !b.peak.CompareAndSwap(p, u+n); p = b.peak.Load() {
			}
			return true
		}
	}
}

func (b *memBudget) release(n int64) { b.used.Add(-n) }

// next returns the data of the next event. The slice is valid until the
// following call. At the end of the stream it returns io.EOF (an event cut
// off by the end, with no blank line after it, is still returned first).
func (s *sseReader) next() ([]byte, error) {
	s.data = s.data[:0]
	have := false
	for {
		line, err := s.readLine()
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
		if have {
			if len(s.data)+1+len(value) > maxSSELine {
				return nil, errLineTooLong
			}
			if err := s.grow(&s.data, 1+len(value)); err != nil {
				return nil, err
			}
			s.data = append(s.data, '\n')
		} else if err := s.grow(&s.data, len(value)); err != nil {
			return nil, err
		}
		s.data = append(s.data, value...)
		have = true
	}
}

// readLine returns the next line without its line ending. A last line without
// a newline is returned before io.EOF. Lines longer than br's buffer are
// gathered in s.line, whose growth is charged to the budget.
func (s *sseReader) readLine() ([]byte, error) {
	b, err := s.br.ReadSlice('\n')
	if err == nil {
		return trimEOL(b), nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if len(b) > 0 && errors.Is(err, io.EOF) {
			return trimEOL(b), nil
		}
		return nil, err
	}
	s.line = s.line[:0]
	for {
		if len(s.line)+len(b) > maxSSELine {
			return nil, errLineTooLong
		}
		if gerr := s.grow(&s.line, len(b)); gerr != nil {
			return nil, gerr
		}
		s.line = append(s.line, b...)
		switch {
		case err == nil, errors.Is(err, io.EOF) && len(s.line) > 0:
			return trimEOL(s.line), nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, err
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
	firstNs, lastNs int64
	chunks          int     // content chunks (non-empty choices[0].text or .delta.content)
	times           []int64 // arrival of every content chunk, for ITL
	usageOut        int
	haveUsage       bool
	usagePrompt     int    // usage.prompt_tokens
	havePrompt      bool   // the usage chunk gave prompt_tokens
	usageCached     int    // usage.prompt_tokens_details.cached_tokens
	haveCached      bool   // the usage chunk gave cached_tokens
	onFirst         func() // called at the first content chunk, if set
}

func (st *streamState) reset() {
	*st = streamState{times: st.times[:0]}
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
		t := now()
		if isDone(data) {
			return nil
		}
		var c chunk
		if err := c.scan(data); err != nil {
			return fmt.Errorf("%w %.80q: %w", errMalformed, data, err)
		}
		if c.isErr {
			return &errStream{msg: string(c.errMsg)}
		}
		if c.text {
			if st.chunks == 0 {
				st.firstNs = t
				if st.onFirst != nil {
					st.onFirst()
				}
			}
			st.lastNs = t
			st.chunks++
			st.times = append(st.times, t)
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

func isDone(data []byte) bool {
	return string(bytes.TrimSpace(data)) == "[DONE]"
}

// itlMs returns the gaps between consecutive content chunks in ms.
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
