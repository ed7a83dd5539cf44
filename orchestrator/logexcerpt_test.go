package orchestrator

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// exitedProcess is an engine that exited before it was ready, whose log
// tail is the given lines.
type exitedProcess struct {
	lines []string
	done  chan struct{}
}

func (p *exitedProcess) Pid() int                                  { return 4242 }
func (p *exitedProcess) Done() <-chan struct{}                     { return p.done }
func (p *exitedProcess) Err() error                                { return errors.New("exit status 1") }
func (p *exitedProcess) Stop(context.Context, time.Duration) error { return nil }
func (p *exitedProcess) LogTail(_ context.Context, n int) string {
	return strings.Join(p.lines[max(0, len(p.lines)-n):], "\n") + "\n"
}

// realVLLMStartFailure is the end of a real vllm serve log (testdata: vLLM
// 0.26.0 on the H200): the engine core's ModuleNotFoundError, then the API
// server's 60-line traceback ending "Engine core initialization failed. See
// root cause above".
func realVLLMStartFailure(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/vllm-start-failure.log")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !strings.HasPrefix(l, "# ") {
			lines = append(lines, l)
		}
	}
	return lines
}

// An engine that exits before it is ready: the error quotes the log's last
// lines and, above them, the earlier error they point to (real vLLM's root
// cause, 40 lines up), which the last 20 lines alone do not hold.
func TestStartFailureQuotesTheEarlierError(t *testing.T) {
	lines := realVLLMStartFailure(t)
	last20 := strings.Join(lines[len(lines)-20:], "\n")
	if strings.Contains(last20, "flashinfer") || !strings.Contains(last20, "See root cause above") {
		t.Fatalf("fixture: the last 20 lines should point above and not name the cause:\n%s", last20)
	}
	p := &exitedProcess{lines: lines, done: make(chan struct{})}
	close(p.done)
	e := &launcher{sweepLog: &sweepLog{redactor: func(s string) string { return s }}}
	err := e.waitReady(context.Background(), &engineProc{name: "engine-local-0", hostName: "local", url: "http://127.0.0.1:1",
		proc: p, command: "vllm serve m", logPath: "/x/engine.log"}, "/health", time.Minute)
	if err == nil {
		t.Fatal("no error for an engine that exited")
	}
	msg := err.Error()
	for _, want := range []string{
		"exited before it was ready (exit status 1)",
		"last lines of /x/engine.log:\nearlier in the log: (EngineCore pid=1190) ModuleNotFoundError: No module named 'flashinfer'\n…\n",
		"RuntimeError: Engine core initialization failed. See root cause above.",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}

func TestLogExcerpt(t *testing.T) {
	for _, c := range []struct{ name, tail, want string }{
		{"short log: all of it", "a\nb\n", "a\nb\n"},
		{"no exception above", "x\ny\nz", "y\nz"},
		{"the same exception below: not repeated", "ValueError: bad\nok\nValueError: bad", "ok\nValueError: bad"},
		{"the last exception above", "KeyError: 'a'\nOSError: [Errno 24] Too many open files\nfine\nRuntimeError: failed",
			"earlier in the log: OSError: [Errno 24] Too many open files\n…\nfine\nRuntimeError: failed"},
		{"a word ending in Error without a message is not one", "ErrorCount: \nMyError:x\nn\nend", "n\nend"},
	} {
		if got := logExcerpt(c.tail, 2); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func FuzzLogExcerpt(f *testing.F) {
	f.Add("a\nValueError: x\nb\nc\n", 2)
	f.Fuzz(func(t *testing.T, tail string, keep int) {
		if keep < 1 || keep > 50 {
			return
		}
		got := logExcerpt(tail, keep)
		lines := strings.Split(strings.TrimRight(tail, "\n"), "\n")
		if len(lines) > keep && !strings.HasSuffix(got, strings.Join(lines[len(lines)-keep:], "\n")) {
			t.Fatalf("excerpt %q does not end with the last %d lines of %q", got, keep, tail)
		}
	})
}
