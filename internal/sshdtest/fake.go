package sshdtest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
)

// StartFake runs an in-process SSH server (gliderlabs/ssh) on 127.0.0.1 that
// executes each exec request with `sh -c` as the current user and allows
// direct-tcpip forwarding. It accepts only the client key and stops in
// t.Cleanup. It is fast and needs no sshd; the Server fields are as for Start.
func StartFake(t testing.TB) *Server {
	t.Helper()
	s, hk := newServer(t, false)
	clientKey := s.ClientSigner.PublicKey().Marshal()
	srv := &gliderssh.Server{
		Handler: func(sess gliderssh.Session) {
			if n, _ := s.noise.Load().(string); n != "" {
				_, _ = io.WriteString(sess, n) // like a login shell's chatty rc file
			}
			handleExec(sess)
		},
		PublicKeyHandler: func(_ gliderssh.Context, key gliderssh.PublicKey) bool {
			return bytes.Equal(key.Marshal(), clientKey)
		},
		LocalPortForwardingCallback: func(gliderssh.Context, string, uint32) bool { return true },
		ChannelHandlers: map[string]gliderssh.ChannelHandler{
			"session":      gliderssh.DefaultSessionHandler,
			"direct-tcpip": gliderssh.DirectTCPIPHandler,
		},
	}
	srv.AddHostKey(hk.signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.finish(t, ln.Addr().String())
	return s
}

// SetLoginNoise makes the in-process server print noise on stdout before
// every command, as a login shell whose rc file echoes something would.
func (s *Server) SetLoginNoise(noise string) { s.noise.Store(noise) }

// handleExec runs the session's command with sh -c. Like sshd, it closes the
// command's stdin when the client's stdin ends or the connection drops, and
// does not kill the command when the client goes away.
func handleExec(sess gliderssh.Session) {
	raw := sess.RawCommand()
	if raw == "" {
		_, _ = io.WriteString(sess.Stderr(), "sshdtest: interactive shells are not supported\n")
		_ = sess.Exit(1)
		return
	}
	cmd := exec.Command("sh", "-c", raw)
	cmd.Stdout, cmd.Stderr = sess, sess.Stderr()
	cmd.WaitDelay = time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		_ = sess.Exit(255)
		return
	}
	if err := cmd.Start(); err != nil {
		_, _ = io.WriteString(sess.Stderr(), err.Error()+"\n")
		_ = sess.Exit(127)
		return
	}
	go func() {
		_, _ = io.Copy(stdin, sess)
		stdin.Close()
	}()
	go func() {
		<-sess.Context().Done()
		stdin.Close()
	}()
	err = cmd.Wait()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		code = 255
	}
	_ = sess.Exit(code)
}
