package hosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/mbench/mbench/shquote"
	"golang.org/x/crypto/ssh"
)

// exec runs cmd as `sh -c` in a session. Without stdin, cmd and runWrapper
// travel on stdin (read by evalStdin's one-line command, which any login
// shell, csh included, passes on intact); runWrapper kills cmd's group when
// the session's stdin closes, which is how cancelling ctx reaches the host.
func (t *sshTransport) exec(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error {
	s, c, err := t.session(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	var stdinW io.WriteCloser
	var full, script string
	if stdin == nil {
		script = "set -- " + shquote.Quote(cmd) + "\n" + runWrapper + "\n"
		full = evalStdin(len(script))
		if stdinW, err = s.StdinPipe(); err != nil {
			return err
		}
	} else {
		full = "sh -c " + shquote.Quote(cmd)
		s.Stdin = stdin
	}
	s.Stdout, s.Stderr = stdout, stderr
	if err := s.Start(full); err != nil {
		return t.lost(c, err)
	}
	// x/crypto/ssh must not see Write and Close of a channel at once, so
	// stdin is closed only after the script is written (or given up on).
	written := make(chan struct{})
	if stdinW != nil {
		go func() { defer close(written); _, _ = io.WriteString(stdinW, script) }()
	} else {
		close(written)
	}
	closeStdin := func() {
		if stdinW == nil {
			return
		}
		select {
		case <-written:
			stdinW.Close()
		case <-time.After(2 * time.Second): // s.Close (deferred) ends the write
		}
	}
	waitc := make(chan error, 1)
	go func() { waitc <- s.Wait() }()
	select {
	case err = <-waitc:
		closeStdin()
		return t.exitError(c, err)
	case <-ctx.Done():
		closeStdin() // the wrapper kills the group
		_ = s.Signal(ssh.SIGKILL)
		select {
		case <-waitc:
		case <-time.After(2 * time.Second):
		}
		return ctx.Err()
	}
}

// exitError maps a session result to *ExitError or ErrConnectionLost.
func (t *sshTransport) exitError(c *sshConn, err error) error {
	if ee, ok := errors.AsType[*ssh.ExitError](err); ok {
		code := ee.ExitStatus()
		if sig := ee.Signal(); sig != "" {
			code = 128 + signalNumbers[sig]
		}
		return &ExitError{Code: code}
	}
	if err == nil {
		return nil
	}
	return t.lost(c, err)
}

// lost wraps an error of a session whose connection broke.
func (t *sshTransport) lost(c *sshConn, err error) error {
	if _, missing := errors.AsType[*ssh.ExitMissingError](err); missing || c.isDead() || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		c.close()
		return fmt.Errorf("host %s: %w: %v", t.cfg.Name, ErrConnectionLost, err)
	}
	return fmt.Errorf("host %s: %w", t.cfg.Name, err)
}

var signalNumbers = map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "ABRT": 6, "FPE": 8,
	"KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15}

func (t *sshTransport) open(ctx context.Context, cmd string) (*stream, error) {
	s, c, err := t.session(ctx)
	if err != nil {
		return nil, err
	}
	stdin, err := s.StdinPipe()
	if err != nil {
		s.Close()
		return nil, err
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		s.Close()
		return nil, err
	}
	var errb bytes.Buffer
	s.Stderr = &errb
	if err := s.Start(cmd); err != nil {
		s.Close()
		return nil, t.lost(c, err)
	}
	return &stream{
		stdin:  stdin,
		stdout: stdout,
		stderr: &errb,
		wait:   func() error { return t.exitError(c, s.Wait()) },
		kill:   func() { s.Close() },
	}, nil
}

func (t *sshTransport) canTether() bool { return true }

// forward listens on 127.0.0.1:0 and tunnels each connection to remoteAddr
// through a direct-tcpip channel.
func (t *sshTransport) forward(ctx context.Context, remoteAddr string) (string, error) {
	if _, _, err := net.SplitHostPort(remoteAddr); err != nil {
		return "", fmt.Errorf("forward on %s: remote address %q: %w", t.cfg.Name, remoteAddr, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("forward on %s: %w", t.cfg.Name, err)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		ln.Close()
		return "", fmt.Errorf("forward on %s: host closed", t.cfg.Name)
	}
	t.listeners[ln] = struct{}{}
	t.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	go func() {
		defer stop()
		defer func() {
			t.mu.Lock()
			delete(t.listeners, ln)
			t.mu.Unlock()
		}()
		for {
			lc, err := ln.Accept()
			if err != nil {
				return
			}
			go t.pipe(ctx, lc, remoteAddr)
		}
	}()
	return ln.Addr().String(), nil
}

// pipe connects one accepted local connection to remoteAddr on the host.
func (t *sshTransport) pipe(ctx context.Context, lc net.Conn, remoteAddr string) {
	defer lc.Close()
	var rc net.Conn
	for range 2 {
		c, err := t.conn(ctx, nil)
		if err != nil {
			return
		}
		if rc, err = c.client.DialContext(ctx, "tcp", remoteAddr); err == nil {
			break
		}
		if _, ok := errors.AsType[*ssh.OpenChannelError](err); ok {
			return // refused by the host (nothing listening, forwarding disabled)
		}
		c.close()
	}
	if rc == nil {
		return
	}
	defer rc.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(rc, lc); done <- struct{}{} }()
	go func() { _, _ = io.Copy(lc, rc); done <- struct{}{} }()
	<-done
}

func (t *sshTransport) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for ln := range t.listeners {
		ln.Close()
	}
	for _, c := range t.conns {
		c.close()
	}
	t.conns = nil
	return nil
}
