package hosts

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/sshdtest"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// servers: the fast in-process server and the real sshd.
var servers = []struct {
	name  string
	start func(testing.TB, ...string) *sshdtest.Server
}{
	{"fake-ssh", func(t testing.TB, _ ...string) *sshdtest.Server { return sshdtest.StartFake(t) }},
	{"sshd", sshdtest.StartWithConfig},
}

func TestHostKeyPolicies(t *testing.T) {
	t.Parallel()
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			s := sv.start(t)
			ctx := ctxT(t, 30*time.Second)
			dir := t.TempDir()
			dial := func(policy, kh string, warn io.Writer) error {
				h, err := DialSSH(ctx, testConfig(s, func(c *SSHConfig) { c.HostKeyPolicy, c.KnownHosts, c.Warn = policy, kh, warn }))
				if err == nil {
					_, _, err = h.Run(ctx, "true")
					h.Close()
				}
				return err
			}
			// Mismatch: known_hosts holds another key for this address.
			pub, _, _ := ed25519.GenerateKey(nil)
			other, _ := ssh.NewPublicKey(pub)
			bad := filepath.Join(dir, "bad_known_hosts")
			os.WriteFile(bad, []byte("# comment\n"+knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, other)+"\n"), 0o600)
			for _, policy := range []string{"", PolicyStrict, PolicyAcceptNew} {
				err := dial(policy, bad, io.Discard)
				if err == nil || !strings.Contains(err.Error(), "MISMATCH") || !strings.Contains(err.Error(), bad+":2") ||
					!strings.Contains(err.Error(), ssh.FingerprintSHA256(s.HostPublicKey)) {
					t.Fatalf("policy %q with a mismatching key: %v", policy, err)
				}
			}
			// Unknown host: refused under strict, recorded under accept-new.
			kh := filepath.Join(dir, "sub", "known_hosts")
			if err := dial("", kh, io.Discard); err == nil || !strings.Contains(err.Error(), "accept-new") ||
				!strings.Contains(err.Error(), ssh.FingerprintSHA256(s.HostPublicKey)) {
				t.Fatalf("strict with unknown host: %v", err)
			}
			var warn bytes.Buffer
			if err := dial(PolicyAcceptNew, kh, &warn); err != nil {
				t.Fatalf("accept-new: %v", err)
			}
			if b, _ := os.ReadFile(kh); string(b) != s.KnownHostsLine()+"\n" || !strings.Contains(warn.String(), "added") {
				t.Fatalf("known_hosts after accept-new = %q, warn %q", b, warn.String())
			}
			if err := dial(PolicyStrict, kh, io.Discard); err != nil {
				t.Fatalf("strict after accept-new: %v", err)
			}
			// Insecure: accepted with a warning on every connection.
			warn.Reset()
			for range 2 {
				if err := dial(PolicyInsecure, bad, &warn); err != nil {
					t.Fatal(err)
				}
			}
			if n := strings.Count(warn.String(), "NOT verified"); n != 2 {
				t.Fatalf("insecure warned %d times: %q", n, warn.String())
			}
			if err := dial("yolo", kh, io.Discard); err == nil || !strings.Contains(err.Error(), "accept-new") {
				t.Fatalf("unknown policy: %v", err)
			}
		})
	}
}

func TestAliasAndProxyJump(t *testing.T) {
	t.Parallel()
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			s := sv.start(t)
			ctx := ctxT(t, 30*time.Second)
			cfg := filepath.Join(t.TempDir(), "config")
			body, _ := os.ReadFile(s.SSHConfigPath)
			body = append(body, fmt.Sprintf("Host viajump\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n  ProxyJump %s\n",
				s.Port, s.User, s.ClientKeyPath, sshdtest.Alias)...)
			os.WriteFile(cfg, body, 0o600)
			for i, addr := range []string{sshdtest.Alias, "viajump"} {
				before := s.Accepted()
				h, err := DialSSH(ctx, SSHConfig{Address: addr, SSHConfigPath: cfg, KnownHosts: s.KnownHostsPath})
				if n := s.Accepted() - before; err == nil && n != i+1 {
					t.Fatalf("%s: %d connections reached the server, want %d", addr, n, i+1)
				}
				if err != nil {
					t.Fatalf("%s: %v", addr, err)
				}
				out, _, err := h.Run(ctx, "echo $SSH_CONNECTION")
				h.Close()
				if err != nil || (s.Real && !strings.HasPrefix(string(out), "127.0.0.1 ")) {
					t.Fatalf("%s: %q %v", addr, out, err)
				}
			}
		})
	}
}

func TestEncryptedKey(t *testing.T) {
	s := sshdtest.StartFake(t)
	ctx := ctxT(t, 20*time.Second)
	enc := s.WriteEncryptedKey(t, "passphrase")
	t.Setenv("SSH_AUTH_SOCK", "")
	_, err := DialSSH(ctx, testConfig(s, func(c *SSHConfig) { c.Identity = []string{enc} }))
	if err == nil || !strings.Contains(err.Error(), enc) || !strings.Contains(err.Error(), "encrypted") ||
		!strings.Contains(err.Error(), "ssh-agent") {
		t.Fatalf("encrypted key without agent: %v", err)
	}
	// With an agent holding the key, the same config works.
	raw, _ := ssh.ParseRawPrivateKeyWithPassphrase(mustRead(t, enc), []byte("passphrase"))
	kr := agent.NewKeyring()
	if err := kr.Add(agent.AddedKey{PrivateKey: raw}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = agent.ServeAgent(kr, c); c.Close() }()
		}
	}()
	t.Setenv("SSH_AUTH_SOCK", sock)
	h, err := DialSSH(ctx, testConfig(s, func(c *SSHConfig) { c.Identity = []string{enc} }))
	if err != nil {
		t.Fatalf("with agent: %v", err)
	}
	h.Close()
	// A missing explicit identity is an error naming it.
	if _, err := DialSSH(ctx, testConfig(s, func(c *SSHConfig) { c.Identity = []string{"/nonexistent/key"} })); err == nil ||
		!strings.Contains(err.Error(), "/nonexistent/key") {
		t.Fatalf("missing identity: %v", err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConnectionCut: when the connection drops, a tethered process is
// reported Done with ErrConnectionLost and is killed on the host, and later
// commands reconnect.
func TestConnectionCut(t *testing.T) {
	t.Parallel()
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			s := sv.start(t)
			h := dialTest(t, s, nil)
			ctx := ctxT(t, 30*time.Second)
			spec := testSpec(t, "tethered", `trap "" TERM; sleep 1000`)
			spec.TetherGrace = 300 * time.Millisecond
			p, err := h.Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			s.Cut()
			select {
			case <-p.Done():
			case <-time.After(time.Minute): // a hang's bound
				t.Fatal("process not Done after the connection was cut")
			}
			if !errors.Is(p.Err(), ErrConnectionLost) || !strings.Contains(p.Err().Error(), "ssh connection lost") {
				t.Fatalf("Err = %v", p.Err())
			}
			waitGone(t, p.Pid(), time.Minute)
			if out, _, err := h.Run(ctx, "echo again"); err != nil || string(out) != "again\n" {
				t.Fatalf("Run after reconnect: %q %v", out, err)
			}
			if err := p.Stop(ctx, time.Second); err != nil {
				t.Fatalf("Stop after reconnect: %v", err)
			}
			if _, err := os.Stat(filepath.Join(spec.StateDir, "tethered.pid")); !os.IsNotExist(err) {
				t.Fatalf("pidfile kept: %v", err)
			}
		})
	}
}

// TestKeepaliveDetectsBlackHole: with no byte getting through, three missed
// keepalives close the connection; the process is reported lost.
func TestKeepaliveDetectsBlackHole(t *testing.T) {
	t.Parallel()
	s := sshdtest.StartFake(t)
	h := dialTest(t, s, func(c *SSHConfig) { c.KeepAlive = 200 * time.Millisecond })
	ctx := ctxT(t, 20*time.Second)
	p, err := h.Start(ctx, testSpec(t, "bh", "sleep 1000"))
	if err != nil {
		t.Fatal(err)
	}
	s.Stall()
	select {
	case <-p.Done():
	case <-time.After(time.Minute): // a hang's bound
		t.Fatal("keepalive did not detect the dead connection")
	}
	if !errors.Is(p.Err(), ErrConnectionLost) {
		t.Fatalf("Err = %v", p.Err())
	}
	s.Resume() // the server side now sees EOF and the tether fires
	waitGone(t, p.Pid(), time.Minute)
}

// TestMaxSessions: more concurrent sessions than sshd's MaxSessions open
// more connections instead of failing.
func TestMaxSessions(t *testing.T) {
	t.Parallel()
	s := sshdtest.StartWithConfig(t, "MaxSessions 2")
	h := dialTest(t, s, nil)
	ctx := ctxT(t, 30*time.Second)
	var ps []Process
	for i := range 3 {
		p, err := h.Start(ctx, testSpec(t, fmt.Sprintf("m%d", i), "sleep 1000"))
		if err != nil {
			t.Fatalf("Start %d: %v", i, err)
		}
		ps = append(ps, p)
	}
	if n := s.Accepted(); n < 2 {
		t.Fatalf("3 sessions over %d connection(s) with MaxSessions 2", n)
	}
	if out, _, err := h.Run(ctx, "echo ok"); err != nil || string(out) != "ok\n" {
		t.Fatalf("Run: %q %v", out, err)
	}
	for _, p := range ps {
		if err := p.Stop(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

func TestForward(t *testing.T) {
	t.Parallel()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") }))
	defer web.Close()
	remote := strings.TrimPrefix(web.URL, "http://")
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			h, _ := k.new(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			local, err := h.Forward(ctx, remote)
			if err != nil {
				t.Fatal(err)
			}
			if k.name != "local" && local == remote {
				t.Fatal("SSH forward returned the remote address")
			}
			for range 3 {
				resp, err := http.Get("http://" + local + "/ping")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "pong" {
					t.Fatalf("through the tunnel: %q", b)
				}
			}
		})
	}
}

// TestUnreachableHostDialsOnce: a host that stops answering is given up
// after the whole reconnect backoff (5 dials); every later command dials it
// once, not the backoff again, until a dial succeeds, which restores the
// backoff for the next loss. The dials are counted at the server's door.
func TestUnreachableHostDialsOnce(t *testing.T) {
	t.Parallel()
	s := sshdtest.StartFake(t)
	h := dialTest(t, s, func(c *SSHConfig) { c.DialTimeout = 300 * time.Millisecond })
	ctx := ctxT(t, 2*time.Minute)
	lose := func() {
		s.Stall()
		s.Cut()
	}
	run := func(wantDials int, wantErr string) {
		t.Helper()
		before := s.Accepted()
		_, _, err := h.Run(ctx, "true")
		dials := s.Accepted() - before
		var ue *UnreachableError
		switch {
		case wantErr == "" && err != nil:
			t.Fatalf("Run: %v", err)
		case wantErr != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), wantErr)):
			t.Fatalf("Run: %v; want an UnreachableError saying %q", err, wantErr)
		case dials != wantDials:
			t.Fatalf("Run (%v) dialled %d times, want %d", err, dials, wantDials)
		}
	}
	run(0, "")
	lose()
	run(5, "gave up after 5 attempts")
	run(1, "gave up after 1 attempt")
	run(1, "gave up after 1 attempt")
	s.Resume()
	run(1, "")
	lose()
	run(5, "gave up after 5 attempts")
	s.Resume()
}
