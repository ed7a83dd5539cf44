package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// TestLoadSecretsNeverWritten: mbench load given credentials in its URL
// (user:PASSWORD@, and a token as the user), a header value and an API key
// from the environment writes none of them into requests.jsonl,
// summary_A.json or its output, and still sends the requests.
func TestLoadSecretsNeverWritten(t *testing.T) {
	const pass, userTok, header, key = "pa55-planted-url", "tok-planted-user", "hdr-planted-value", "sk-planted-env-key"
	s, err := stub.Start(stub.Options{RecordRequests: true, FirstToken: time.Millisecond, Gap: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Setenv("MBENCH_TEST_PLANTED_KEY", key)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, u := range []string{strings.Replace(s.URL, "://", "://alice:"+pass+"@", 1), strings.Replace(s.URL, "://", "://"+userTok+"@", 1)} {
		out := filepath.Join(t.TempDir(), "load")
		stdout, stderr, err := runCLI(t, ctx, "load", "--url", u, "--input", "8", "--output", "4", "--rate", "200", "--requests", "6",
			"--header", "X-Api-Key="+header, "--api-key-env", "MBENCH_TEST_PLANTED_KEY", "--out", out)
		if err != nil && exitStatus(err) != exitNoResult {
			t.Fatalf("load --url %s: %v\n%s", u, err, stderr)
		}
		recs, err := os.ReadFile(filepath.Join(out, "requests.jsonl"))
		if err != nil || strings.Count(string(recs), "\n") < 6 || !strings.Contains(string(recs), `"target":"http://`) {
			t.Fatalf("requests.jsonl holds no records naming their target (%v):\n%s", err, recs)
		}
		files := map[string]string{"stdout": stdout, "stderr": stderr}
		_ = filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				b, _ := os.ReadFile(p)
				files[p] = string(b)
			}
			return err
		})
		for name, text := range files {
			for _, sec := range []string{pass, userTok, header, key} {
				if strings.Contains(text, sec) {
					t.Errorf("--url %s: %s contains %q:\n%s", u, name, sec, text)
				}
			}
		}
	}
	if n := len(s.Entries()); n != 12 {
		t.Errorf("%d requests reached the stub, want 12", n)
	}
}
