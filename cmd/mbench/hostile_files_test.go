package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadRefusesHostileInput: mbench load refuses a FIFO, /dev/zero and an
// 8 GiB (sparse) file as --trace or --dataset, an in-flight level beyond
// 2^20 and a finite rate beyond 10^6 req/s, each before contacting the
// endpoint (nothing listens at its URL) and before reading the file.
func TestLoadRefusesHostileInput(t *testing.T) {
	dir := t.TempDir()
	fifo, big := filepath.Join(dir, "fifo"), filepath.Join(dir, "big.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 8<<30); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := []string{"load", "--url", "http://127.0.0.1:1", "--out", filepath.Join(dir, "out")}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "1", "--trace", fifo}, "trace file " + fifo + " is a FIFO (named pipe), not a regular file"},
		{[]string{"--rate", "1", "--trace", "/dev/zero"}, "trace file /dev/zero is a device, not a regular file"},
		{[]string{"--rate", "1", "--trace", big}, "trace file " + big + " is 8.0 GiB; limit 2 GiB: is this the right file?"},
		{[]string{"--rate", "1", "--requests", "3", "--output", "8", "--dataset", fifo, "--dataset-format", "sharegpt"}, "dataset file " + fifo + " is a FIFO"},
		{[]string{"--rate", "1", "--requests", "3", "--output", "8", "--dataset", big}, "dataset file " + big + " is 8.0 GiB; limit 2 GiB"},
		{[]string{"--concurrency", "1000000000000", "--input", "8", "--output", "8", "--requests", "2"}, "at most 1048576 requests in flight"},
		{[]string{"--rate", "1e308", "--input", "8", "--output", "8", "--requests", "2"}, "1e+308 req/s is more than one load generator offers"},
	} {
		_, stderr, err := runCLI(t, ctx, append(base, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error()+stderr, "model lookup") {
			t.Errorf("load %v: %v\n%s\nwant %q", c.args, err, stderr, c.want)
		}
	}
}
