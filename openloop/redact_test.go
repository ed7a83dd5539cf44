package openloop

import (
	"io"
	"strings"
	"testing"
)

func TestRedactUserinfo(t *testing.T) {
	for in, want := range map[string]string{
		"http://user:PASS@host:8000":                 "http://user:***@host:8000",
		"https://tok3n@api.example/v1":               "https://***@api.example/v1",
		`Post "http://u:p%40ss@h/v1": dial tcp`:      `Post "http://u:***@h/v1": dial tcp`,
		"http://host:8000/v1?q=a@b":                  "http://host:8000/v1?q=a@b",
		"mail a@b.c, http://x:y@h and http://z:w@h2": "mail a@b.c, http://x:***@h and http://z:***@h2",
		"http://127.0.0.1:8000":                      "http://127.0.0.1:8000",
		"http://user:@host":                          "http://user:***@host",
	} {
		if got := RedactUserinfo(in); got != want {
			t.Errorf("RedactUserinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLinesBounded: a trace or JSONL dataset without newlines (a binary
// file under the size limit) is refused at its line limit, not read whole.
func TestLinesBounded(t *testing.T) {
	zeros := func() io.Reader { return io.LimitReader(zeroReader{}, 200<<20) }
	if _, err := ParseTrace(zeros(), "t.jsonl"); err == nil || !strings.Contains(err.Error(), "t.jsonl:1: line longer than 1.0 MiB") {
		t.Errorf("trace: %v", err)
	}
	if _, err := ParseDatasetJSONL("d.jsonl", zeros()); err == nil || !strings.Contains(err.Error(), "line longer than 64.0 MiB") {
		t.Errorf("dataset: %v", err)
	}
	if reqs, err := ParseTrace(strings.NewReader(`{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}`), "t"); err != nil || len(reqs) != 1 {
		t.Errorf("a last line without its newline: %v %v", reqs, err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
