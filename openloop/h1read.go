package openloop

// The raw HTTP/1.1 client's reading side (h1.go is the writing side and the
// pool): the response head, the body in its three framings, and the
// errors that say what went wrong. It reads as net/http's
// http.ReadResponse does wherever both accept a response (h1_test.go's
// FuzzH1Response holds it to that).

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// errMalformedHTTP marks a response that is not valid HTTP/1.1.
var errMalformedHTTP = errors.New("malformed HTTP response")

// h1Head is what the raw client keeps of a response head.
type h1Head struct {
	status  int
	keep    bool          // the connection may be reused after the body
	idleMax time.Duration // how long it may then idle (h1IdleMax, or less: see keepAliveIdle)
}

// readResponseHead reads the status line and headers into body's framing.
// It skips 1xx responses. A server that closes the connection before the
// first byte of the response gives errNoResponse.
func readResponseHead(br *bufio.Reader, body *h1Body) (h1Head, error) {
	if _, err := br.Peek(1); err != nil {
		return h1Head{}, noResponse(err)
	}
	for {
		line, err := readHeadLine(br)
		if err != nil {
			return h1Head{}, unexpectedEOF(err)
		}
		// HTTP/1.x SSS reason
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
			return h1Head{}, fmt.Errorf("%w: status line %.80q", errMalformedHTTP, line)
		}
		status, err := strconv.Atoi(string(line[9:12]))
		if err != nil || status < 100 {
			return h1Head{}, fmt.Errorf("%w: status line %.80q", errMalformedHTTP, line)
		}
		http11 := line[7] >= '1' && line[7] <= '9' // as net/http: HTTP/1.2 is at least 1.1
		keep, idleMax := http11, time.Duration(h1IdleMax)
		*body = h1Body{br: br, rem: -1}
		haveLen := false
		for n := 0; ; n++ {
			h, err := readHeadLine(br)
			if err != nil {
				return h1Head{}, unexpectedEOF(err)
			}
			if len(h) == 0 {
				break
			}
			if n > 200 {
				return h1Head{}, fmt.Errorf("%w: more than 200 header lines", errMalformedHTTP)
			}
			name, value, ok := bytes.Cut(h, []byte(":"))
			if !ok {
				return h1Head{}, fmt.Errorf("%w: header line %.80q", errMalformedHTTP, h)
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				v, err := strconv.ParseInt(string(value), 10, 64)
				if err != nil || v < 0 || value[0] == '+' || (haveLen && v != body.rem) {
					// as net/http: digits only, and repeats must agree
					return h1Head{}, fmt.Errorf("%w: Content-Length %.40q", errMalformedHTTP, value)
				}
				body.rem, haveLen = v, true
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				body.chunked = http11 && bytes.EqualFold(value, []byte("chunked")) // as net/http: not in HTTP/1.0
			case bytes.EqualFold(name, []byte("Connection")):
				if hasToken(value, "close") {
					keep = false
				}
			case bytes.EqualFold(name, []byte("Keep-Alive")):
				idleMax = keepAliveIdle(value)
			}
		}
		if status >= 100 && status < 200 && status != 101 {
			continue
		}
		switch {
		case body.chunked:
			body.rem = 0
		case status == 204 || status == 304:
			body.rem = 0
		case !haveLen:
			keep = false // read to the connection's end
		}
		body.eof = !body.chunked && body.rem == 0
		return h1Head{status: status, keep: keep && idleMax > 0, idleMax: idleMax}, nil
	}
}

// hasToken reports whether the comma-separated header value v lists tok
// (case-insensitive), as Connection: keep-alive, close does "close".
func hasToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte(","))
		if bytes.EqualFold(bytes.TrimSpace(t), []byte(tok)) {
			return true
		}
	}
	return false
}

// keepAliveIdle is how long a connection may idle under the Keep-Alive
// header value v ("timeout=5, max=100"): a second less than the server's
// timeout, at most h1IdleMax; 0 (do not reuse) under a timeout of a second
// or less.
func keepAliveIdle(v []byte) time.Duration {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte(","))
		k, val, ok := bytes.Cut(bytes.TrimSpace(t), []byte("="))
		if !ok || !bytes.EqualFold(bytes.TrimSpace(k), []byte("timeout")) {
			continue
		}
		sec, err := strconv.Atoi(string(bytes.TrimSpace(val)))
		if err != nil || sec < 0 {
			return h1IdleMax // unreadable: as if absent
		}
		return min(time.Duration(max(sec-1, 0))*time.Second, h1IdleMax)
	}
	return h1IdleMax
}

// headCloses reports whether the request head h (header lines, CRLF each,
// up to the blank line) asks the server to close the connection after the
// response (Connection: close).
func headCloses(h []byte) bool {
	for len(h) > 0 {
		var line []byte
		line, h, _ = bytes.Cut(h, []byte("\r\n"))
		if len(line) == 0 {
			return false
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("Connection")) && hasToken(value, "close") {
			return true
		}
	}
	return false
}

// readHeadLine reads one line of a response head without its CRLF; lines
// longer than the reader's buffer are refused.
func readHeadLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: header line longer than %d bytes", errMalformedHTTP, br.Size())
		}
		return nil, err
	}
	return trimEOL(line), nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// h1Body reads a response body: chunked (rem is what is left of the current
// chunk), Content-Length (rem is what is left) or until the connection
// closes (rem < 0).
type h1Body struct {
	br      *bufio.Reader
	chunked bool
	rem     int64
	crlf    bool // a chunk's data ended; its CRLF is still to be read
	eof     bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.chunked {
		if b.crlf {
			if err := b.readCRLF(); err != nil {
				return 0, err
			}
		}
		if b.rem == 0 {
			n, err := b.chunkSize()
			if err != nil {
				return 0, err
			}
			if n == 0 {
				if err := b.trailer(); err != nil {
					return 0, err
				}
				b.eof = true
				return 0, io.EOF
			}
			b.rem = n
		}
	}
	if b.rem >= 0 && int64(len(p)) > b.rem {
		p = p[:b.rem]
	}
	n, err := b.br.Read(p)
	if b.rem >= 0 {
		b.rem -= int64(n)
		if b.rem == 0 {
			if b.chunked {
				b.crlf = true
			} else {
				b.eof = true
			}
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
	} else if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

// pending is how many of the body's bytes are framed but not yet read: the
// rest of the current chunk, or of a Content-Length body (0: unknown).
func (b *h1Body) pending() int64 { return max(b.rem, 0) }

func (b *h1Body) readCRLF() error {
	line, err := b.br.ReadSlice('\n')
	if err != nil {
		return unexpectedEOF(err)
	}
	if len(trimEOL(line)) != 0 {
		return fmt.Errorf("%w: no CRLF after a chunk", errMalformedHTTP)
	}
	b.crlf = false
	return nil
}

// chunkSize reads a chunk-size line (extensions ignored).
func (b *h1Body) chunkSize() (int64, error) {
	line, err := readHeadLine(b.br)
	if err != nil {
		return 0, unexpectedEOF(err)
	}
	line, _, _ = bytes.Cut(line, []byte(";"))
	line = bytes.TrimSpace(line)
	n, err := strconv.ParseInt(string(line), 16, 64)
	if err != nil || n < 0 || len(line) > 12 {
		return 0, fmt.Errorf("%w: chunk size %.40q", errMalformedHTTP, line)
	}
	return n, nil
}

// trailer reads the trailer fields after the last chunk, up to the blank line.
func (b *h1Body) trailer() error {
	for n := 0; n < 100; n++ {
		line, err := readHeadLine(b.br)
		if err != nil {
			return unexpectedEOF(err)
		}
		if len(line) == 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: trailer longer than 100 lines", errMalformedHTTP)
}
