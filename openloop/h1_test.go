package openloop

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// h1Responses are response texts the raw client must read as net/http does.
var h1Responses = []string{
	"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nTrailer: x\r\n\r\n",
	"HTTP/1.1 400 Bad Request\r\ncontent-length: 11\r\n\r\nhello world",
	"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.0 200 OK\r\n\r\nread to the end",
	"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil close",
	"HTTP/1.1 204 No Content\r\n\r\n",
	"HTTP/1.2 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", // a later minor version is chunked too
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
}

// readH1 reads one response with the raw client's reader: status, body and
// whether the connection may be reused.
func readH1(b []byte) (int, []byte, bool, error) {
	var body h1Body
	br := bufio.NewReaderSize(bytes.NewReader(b), 4096)
	h, err := readResponseHead(br, &body)
	if err != nil {
		return 0, nil, false, err
	}
	data, err := io.ReadAll(io.LimitReader(&body, 1<<20))
	return h.status, data, h.keep, err
}

// TestH1MatchesNetHTTP: status and body as http.ReadResponse reads them.
func TestH1MatchesNetHTTP(t *testing.T) {
	for _, r := range h1Responses {
		status, body, _, err := readH1([]byte(r))
		if err != nil {
			t.Errorf("%q: %v", r, err)
			continue
		}
		hr := bufio.NewReader(strings.NewReader(r))
		resp, err := http.ReadResponse(hr, nil)
		for err == nil && resp.StatusCode < 200 { // the Transport skips 1xx too
			resp, err = http.ReadResponse(hr, nil)
		}
		if err != nil {
			t.Fatalf("%q: net/http: %v", r, err)
		}
		want, _ := io.ReadAll(resp.Body)
		if status != resp.StatusCode || !bytes.Equal(body, want) {
			t.Errorf("%q: status %d body %q; net/http: %d %q", r, status, body, resp.StatusCode, want)
		}
	}
}

// TestH1Errors: cut and malformed responses are errors of the right kind.
func TestH1Errors(t *testing.T) {
	for _, c := range []struct {
		in   string
		want error
	}{
		{"", errNoResponse},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", io.ErrUnexpectedEOF},
		{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", io.ErrUnexpectedEOF},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", errMalformedHTTP},
		{"SSH-2.0-OpenSSH\r\n", errMalformedHTTP},
		{"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", errMalformedHTTP},
		{"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", errMalformedHTTP},
		{"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", errMalformedHTTP},
		{"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello", errMalformedHTTP},
	} {
		_, _, _, err := readH1([]byte(c.in))
		if !errors.Is(err, c.want) {
			t.Errorf("%q: error %v, want %v", c.in, err, c.want)
		}
	}
}

// FuzzH1Response: any bytes are read without a panic, and what both the
// raw client and net/http accept gets the same status and body.
func FuzzH1Response(f *testing.F) {
	for _, r := range h1Responses {
		f.Add([]byte(r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		status, body, _, err := readH1(b)
		if err != nil {
			return
		}
		resp, herr := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), nil)
		if herr != nil || resp.StatusCode < 200 {
			return
		}
		want, werr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if werr != nil {
			return
		}
		if status != resp.StatusCode || !bytes.Equal(body, want) {
			t.Errorf("status %d body %q; net/http: %d %q", status, body, resp.StatusCode, want)
		}
	})
}
