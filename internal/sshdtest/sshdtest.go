// Package sshdtest starts SSH servers on loopback for tests: a real OpenSSH
// sshd (Start) and an in-process server (StartFake), both with a fresh host
// key, a client key, a known_hosts file and an ssh_config alias, behind a
// proxy that can cut or stall connections to simulate network failures.
package sshdtest

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Alias is the ssh_config Host alias written to Server.SSHConfigPath.
const Alias = "sshdtest"

// Server is a running test SSH server. Connect with hosts.DialSSH using
// Address = Alias and SSHConfigPath, or Addr with User/ClientKeyPath/KnownHostsPath.
type Server struct {
	Addr           string        // 127.0.0.1:port to connect to (the proxy in front of the server)
	Port           int           // port of Addr
	User           string        // the user to log in as (the current user)
	Dir            string        // temp directory holding every file below
	ClientKeyPath  string        // unencrypted ed25519 private key authorised on the server
	ClientSigner   ssh.Signer    // the same key
	KnownHostsPath string        // known_hosts with the right host key for Addr
	HostPublicKey  ssh.PublicKey // the server's host key
	SSHConfigPath  string        // ssh_config with Host Alias (HostName, Port, User, IdentityFile)
	Real           bool          // true for OpenSSH sshd, false for the in-process server

	proxy *proxy
	noise atomic.Value // string; StartFake only
}

// Cut closes every open connection to the server, both ways, as a network
// failure or a killed sshd child would. New connections still work.
func (s *Server) Cut() { s.proxy.cut() }

// Stall stops forwarding bytes on current and new connections without
// closing them (a black hole), until Resume.
func (s *Server) Stall() { s.proxy.stall() }

// Accepted is the number of connections accepted so far.
func (s *Server) Accepted() int {
	s.proxy.mu.Lock()
	defer s.proxy.mu.Unlock()
	return s.proxy.accepted
}

// Resume ends a Stall.
func (s *Server) Resume() { s.proxy.resume() }

// KnownHostsLine is the known_hosts line for Addr with the right key.
func (s *Server) KnownHostsLine() string {
	return knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, s.HostPublicKey)
}

// sshdPath returns the sshd binary, or "" when it is not installed.
func sshdPath() string {
	if p := os.Getenv("MBENCH_SSHD"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/sbin/sshd"); err == nil {
		return "/usr/sbin/sshd"
	}
	if p, err := exec.LookPath("sshd"); err == nil {
		return p
	}
	return ""
}

// Start runs a real OpenSSH sshd on 127.0.0.1 for the test and stops it in
// t.Cleanup. Without sshd the test is skipped, or fails when
// MBENCH_REQUIRE_SSHD=1. The sshd runs with a temporary config: key-only
// login for the current user, TCP forwarding allowed, no AcceptEnv, and
// SetEnv SHLVL=1 so that bash does not source a slow ~/.bashrc per session.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWithConfig(t)
}

// StartWithConfig is Start with extra lines appended to sshd_config (e.g.
// "MaxSessions 2").
func StartWithConfig(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := sshdPath()
	if bin == "" {
		if os.Getenv("MBENCH_REQUIRE_SSHD") == "1" {
			t.Fatal("sshdtest: sshd not found and MBENCH_REQUIRE_SSHD=1 (install openssh-server)")
		}
		t.Skip("sshdtest: sshd not installed (set MBENCH_REQUIRE_SSHD=1 to fail instead)")
	}
	s, hostSigner := newServer(t, true)
	hostKeyPath := filepath.Join(s.Dir, "ssh_host_ed25519_key")
	writeKey(t, hostKeyPath, hostSigner.priv)
	authKeys := filepath.Join(s.Dir, "authorized_keys")
	write(t, authKeys, string(ssh.MarshalAuthorizedKey(s.ClientSigner.PublicKey())), 0o600)
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil && os.Geteuid() == 0 {
		t.Fatalf("sshdtest: %v", err)
	}
	var lastLog string
	for attempt := 0; attempt < 3; attempt++ {
		port := freePort(t)
		cfg := filepath.Join(s.Dir, "sshd_config")
		lines := []string{
			"ListenAddress 127.0.0.1", "Port " + strconv.Itoa(port), "HostKey " + hostKeyPath,
			"PidFile " + filepath.Join(s.Dir, "sshd.pid"), "AuthorizedKeysFile " + authKeys,
			"StrictModes no", "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
			"PubkeyAuthentication yes", "PermitRootLogin prohibit-password", "AllowTcpForwarding yes",
			"X11Forwarding no", "PrintMotd no", "LogLevel INFO",
			// bash sources ~/.bashrc for commands run by sshd unless SHLVL says it
			// is nested; a slow rc file (pyenv, conda) would cost every session.
			"SetEnv SHLVL=1",
		}
		lines = append(lines, extra...)
		write(t, cfg, strings.Join(lines, "\n")+"\n", 0o600)
		cmd := exec.Command(bin, "-D", "-e", "-f", cfg)
		logb := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = logb, logb
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatalf("sshdtest: start %s: %v", bin, err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		backend := fmt.Sprintf("127.0.0.1:%d", port)
		if waitBanner(backend, exited, 10*time.Second) {
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(5 * time.Second):
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				}
				if t.Failed() {
					t.Logf("sshd log:\n%s", logb.String())
				}
			})
			s.finish(t, backend)
			return s
		}
		_ = cmd.Process.Kill()
		<-exited
		lastLog = logb.String()
	}
	t.Fatalf("sshdtest: sshd did not start:\n%s", lastLog)
	return nil
}

// hostKey is a generated ed25519 host key.
type hostKey struct {
	priv   ed25519.PrivateKey
	signer ssh.Signer
}

// newServer creates the directory, the client key and the host key.
func newServer(t testing.TB, real bool) (*Server, hostKey) {
	t.Helper()
	dir := t.TempDir()
	u, err := user.Current()
	if err != nil {
		t.Fatalf("sshdtest: current user: %v", err)
	}
	s := &Server{User: u.Username, Dir: dir, Real: real}
	_, cpriv, _ := ed25519.GenerateKey(rand.Reader)
	s.ClientKeyPath = filepath.Join(dir, "id_ed25519")
	writeKey(t, s.ClientKeyPath, cpriv)
	s.ClientSigner, _ = ssh.NewSignerFromKey(cpriv)
	_, hpriv, _ := ed25519.GenerateKey(rand.Reader)
	hs, _ := ssh.NewSignerFromKey(hpriv)
	s.HostPublicKey = hs.PublicKey()
	return s, hostKey{priv: hpriv, signer: hs}
}

// finish starts the proxy in front of backend and writes known_hosts and ssh_config.
func (s *Server) finish(t testing.TB, backend string) {
	t.Helper()
	s.proxy = startProxy(t, backend)
	s.Addr = s.proxy.addr
	_, p, _ := net.SplitHostPort(s.Addr)
	s.Port, _ = strconv.Atoi(p)
	s.KnownHostsPath = filepath.Join(s.Dir, "known_hosts")
	write(t, s.KnownHostsPath, s.KnownHostsLine()+"\n", 0o600)
	s.SSHConfigPath = filepath.Join(s.Dir, "ssh_config")
	write(t, s.SSHConfigPath, fmt.Sprintf("Host %s\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n",
		Alias, s.Port, s.User, s.ClientKeyPath), 0o600)
}

// WriteEncryptedKey writes the client key encrypted with passphrase to a new
// file and returns its path.
func (s *Server) WriteEncryptedKey(t testing.TB, passphrase string) string {
	t.Helper()
	b, err := os.ReadFile(s.ClientKeyPath)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ssh.ParseRawPrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKeyWithPassphrase(raw, "", []byte(passphrase))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(s.Dir, "id_ed25519_encrypted")
	write(t, p, string(pem.EncodeToMemory(blk)), 0o600)
	return p
}

func writeKey(t testing.TB, path string, k ed25519.PrivateKey) {
	t.Helper()
	blk, err := ssh.MarshalPrivateKey(k, "")
	if err != nil {
		t.Fatal(err)
	}
	write(t, path, string(pem.EncodeToMemory(blk)), 0o600)
}

func write(t testing.TB, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitBanner waits until addr answers with an SSH banner.
func waitBanner(addr string, exited <-chan struct{}, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "SSH-2.0-") {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// syncBuffer is a goroutine-safe log buffer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
