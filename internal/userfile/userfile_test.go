package userfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRefusals: a FIFO, a device, a directory and a sparse file over the
// limit are refused at the open, before anything is read; a regular file
// within the limit reads whole.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 8<<30); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	ok := filepath.Join(dir, "ok.jsonl")
	if err := os.WriteFile(ok, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		fifo:        "trace file is a FIFO (named pipe), not a regular file",
		"/dev/zero": "trace file is a device, not a regular file",
		dir:         "trace file is a directory, not a file",
		big:         "trace file is 8.0 GiB; limit 2 GiB: is this the right file?",
	} {
		_, err := ReadFile(path, "trace file", 2<<30)
		if err == nil || !errors.Is(err, ErrRefused) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", path, err, want)
		}
	}
	if b, err := ReadFile(ok, "trace file", 3); err != nil || string(b) != "{}\n" {
		t.Errorf("a file at its limit: %q, %v", b, err)
	}
	if _, err := ReadFile(ok, "trace file", 2); err == nil || !strings.Contains(err.Error(), "3 B; limit 2 B") {
		t.Errorf("a file over its limit: %v", err)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{5: "5 B", 1536: "1.5 KiB", 8 << 30: "8.0 GiB", 4 << 20: "4.0 MiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %s, want %s", n, got, want)
		}
	}
	if got := limitSize(2 << 30); got != "2 GiB" {
		t.Errorf("limitSize = %s", got)
	}
}
