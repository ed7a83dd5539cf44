package hosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"
)

// NewLocal returns the Host for this machine. Its commands run with `sh -c`
// in their own process group; ProcSpec.Tether is ignored, so local engines
// outlive a killed mbench and are found again with StopLeftovers.
func NewLocal() Host {
	return &host{name: "local", t: localTransport{}, ops: localOps{}}
}

// localTransport runs sh children of this process.
type localTransport struct{}

// command builds an `sh -c` child in a process group of its own, so that
// cancelling kills everything it started and terminal signals do not reach it.
func (localTransport) command(cmd string) *exec.Cmd {
	c := exec.Command("sh", "-c", cmd)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.WaitDelay = 2 * time.Second
	return c
}

func (t localTransport) exec(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	c := t.command(cmd)
	c.Stdin, c.Stdout, c.Stderr = stdin, stdout, stderr
	if err := c.Start(); err != nil {
		return fmt.Errorf("local: start sh: %w", err)
	}
	waitc := make(chan error, 1)
	go func() { waitc <- c.Wait() }()
	select {
	case err := <-waitc:
		return localExitError(err)
	case <-ctx.Done():
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		<-waitc
		return ctx.Err()
	}
}

// localExitError maps exec errors to *ExitError.
func localExitError(err error) error {
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return &ExitError{Code: code}
	}
	return err
}

func (t localTransport) open(ctx context.Context, cmd string) (*stream, error) {
	c := t.command(cmd)
	stdin, err := c.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("local: start sh: %w", err)
	}
	var waited atomic.Bool // once reaped, the group id may be reused: never signal it
	return &stream{
		stdin:  stdin,
		stdout: stdout,
		stderr: &errb,
		wait: func() error {
			err := c.Wait()
			waited.Store(true)
			return localExitError(err)
		},
		kill: func() {
			if !waited.Load() {
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			}
		},
	}, nil
}

func (localTransport) canTether() bool { return false }

func (localTransport) forward(_ context.Context, remoteAddr string) (string, error) {
	return remoteAddr, nil
}

func (localTransport) close() error { return nil }
