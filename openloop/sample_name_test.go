package openloop

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSampleTraceNamesFile: sampling a file names the file and line of a bad
// line.
func TestSampleTraceNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.jsonl")
	body := `{"timestamp": 1, "input_length": 5, "output_length": 1}` + "\n" + `{"timestamp": 2, "input_length": 5}` + "\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = SampleTrace(context.Background(), f, io.Discard, 1, 1)
	if want := "trace sample: " + p + ":2: output_length: missing"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want prefix %q", err, want)
	}
}

// SampleTrace samples about requests requests of whole sessions with seed,
// sessions found as SessionsAuto does. See SampleTraceWith.
func SampleTrace(ctx context.Context, in io.Reader, out io.Writer, requests int, seed int64) error {
	_, err := SampleTraceWith(ctx, in, out, SampleOptions{Requests: requests, Seed: seed})
	return err
}
