package stub

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/mbench/mbench/internal/cpupin"
	"github.com/shirou/gopsutil/v4/process"
)

// OptionsEnv is the environment variable that carries a child stub's Options
// (as JSON) from StartProcess to ServeProcess.
const OptionsEnv = "MBENCH_STUB_OPTIONS"

// Process is a stub serving from a child process, so that its CPU is not
// counted as the load generator's and the two compete for the cores as a
// real engine and client do.
type Process struct {
	URL   string // base URL, http://127.0.0.1:PORT
	cmd   *exec.Cmd
	stdin io.WriteCloser
	hc    *http.Client
}

// StartProcess runs argv (a program that calls ServeProcess, e.g. the
// running binary with a hidden subcommand) with o in its environment and
// waits for it to report its URL. Options.Fault cannot cross a process and
// must be nil.
func StartProcess(ctx context.Context, argv []string, o Options) (*Process, error) {
	if o.Fault != nil {
		return nil, errors.New("stub process: Options.Fault cannot be sent to a child process")
	}
	enc, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("stub process: %w", err)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), OptionsEnv+"="+string(enc))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("stub process: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("stub process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("stub process: start %s: %w", argv[0], err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	url := strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(url, "http://127.0.0.1:") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("stub process: %s did not report its URL (got %q): %v", argv[0], line, err)
	}
	return &Process{URL: url, cmd: cmd, stdin: stdin, hc: &http.Client{Timeout: time.Minute}}, nil
}

// Entries returns the child's log (GET /stub/log).
func (p *Process) Entries(ctx context.Context) ([]Entry, error) {
	var out []Entry
	return out, p.call(ctx, http.MethodGet, "/stub/log", &out)
}

// Reset clears the child's log (POST /stub/reset).
func (p *Process) Reset(ctx context.Context) error {
	return p.call(ctx, http.MethodPost, "/stub/reset", nil)
}

// CPUSeconds is the child's user+system CPU time so far.
func (p *Process) CPUSeconds() (float64, error) {
	pr, err := process.NewProcess(int32(p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("stub process: %w", err)
	}
	t, err := pr.Times()
	if err != nil {
		return 0, fmt.Errorf("stub process: %w", err)
	}
	return t.User + t.System, nil
}

func (p *Process) call(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, p.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return fmt.Errorf("stub process: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("stub process: %s %s: HTTP %d", method, path, resp.StatusCode)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("stub process: %s %s: %w", method, path, err)
	}
	return nil
}

// Close ends the child (closing its stdin) and waits for it.
func (p *Process) Close() error {
	p.hc.CloseIdleConnections()
	_ = p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		return <-done
	}
}

// ServeProcess is the child side of StartProcess: it starts a Server with the
// Options in OptionsEnv, writes its URL as one line to stdout and serves,
// with /stub/log and /stub/reset, until stdin reaches its end.
func ServeProcess(stdin io.Reader, stdout io.Writer) error {
	var o Options
	if err := json.Unmarshal([]byte(os.Getenv(OptionsEnv)), &o); err != nil {
		return fmt.Errorf("stub: %s: %w", OptionsEnv, err)
	}
	o.control = true
	if len(o.CPUs) > 0 {
		if err := cpupin.Self(o.CPUs); err != nil {
			return fmt.Errorf("stub: %w", err)
		}
		runtime.GOMAXPROCS(len(o.CPUs))
	}
	s, err := Start(o)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := fmt.Fprintln(stdout, s.URL); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, stdin)
	return nil
}
