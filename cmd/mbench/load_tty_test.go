//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the terminal side (what a program
// writes to, a TTY to term.IsTerminal) and the controller side that reads
// what it shows.
func openPTY(t *testing.T) (tty, ctl *os.File) {
	t.Helper()
	ctl, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal on this machine: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(ctl.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ctl.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tty, ctl
}

// TestLoadOnTerminal: on a terminal, mbench load draws a progress bar
// (requests done of the total, in flight, the rate) on stderr and prints
// the summary table and the verdict on stdout; --disable-tqdm leaves the
// bar out, and off a terminal progress comes as lines.
func TestLoadOnTerminal(t *testing.T) {
	t.Parallel()
	srv, err := stub.Start(stub.Options{Tokens: 4, FirstToken: 5 * time.Millisecond, Gap: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	show := func(extra ...string) string {
		tty, ctl := openPTY(t)
		defer ctl.Close()
		var screen bytes.Buffer
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = io.Copy(&screen, ctl) }()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out := filepath.Join(t.TempDir(), "load")
		args := append([]string{"mbench", "load", "--base-url", srv.URL, "--model", "stub-model", "--random-input-len", "8",
			"--random-output-len", "4", "--num-prompts", "30", "--request-rate", "60", "--out", out}, extra...)
		err := run(ctx, args, tty, tty)
		if err := ranToEnd(t, err, out); err != nil {
			t.Fatalf("load: %v", err)
		}
		tty.Close() // the reader sees EOF (EIO) once the terminal side is closed
		wg.Wait()
		return screen.String()
	}
	s := show()
	for _, want := range []string{"30/30", "in flight", "req/s", "Serving Benchmark Result", "Successful requests:", "verdict: "} {
		if !strings.Contains(s, want) {
			t.Errorf("the terminal does not show %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, `"median_ttft_ms"`) {
		t.Errorf("JSON on a terminal without --format json:\n%s", s)
	}
	if s := show("--disable-tqdm"); strings.Contains(s, "in flight") || !strings.Contains(s, "Serving Benchmark Result") {
		t.Errorf("--disable-tqdm: the bar is still drawn, or the table is gone:\n%s", s)
	}
	out := filepath.Join(t.TempDir(), "load")
	_, stderr, err := runCLI(t, context.Background(), "load", "--base-url", srv.URL, "--model", "stub-model", "--random-input-len", "8",
		"--random-output-len", "4", "--num-prompts", "30", "--request-rate", "60", "--out", out)
	if err := ranToEnd(t, err, out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "load: [done] 30/30 requests done (0 failed), 0 in flight") {
		t.Errorf("off a terminal, no progress line:\n%s", stderr)
	}
}
