package hosts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kevinburke/ssh_config"
	"github.com/mbench/mbench/internal/clock"
	"golang.org/x/crypto/ssh"
)

// SSHConfig configures DialSSH.
type SSHConfig struct {
	// Name is the host's name in messages; "" means Address.
	Name string
	// Address is an ssh_config alias or [user@]host[:port]. ssh_config's
	// HostName, User, Port, IdentityFile, ProxyJump and UserKnownHostsFile
	// apply; a user or port in Address wins.
	Address string
	// HostKeyPolicy is strict (default), accept-new or insecure.
	HostKeyPolicy string
	// KnownHosts is the known_hosts file; "" means ssh_config's
	// UserKnownHostsFile, else ~/.ssh/known_hosts.
	KnownHosts string
	// SSHConfigPath is the ssh_config file; "" means ~/.ssh/config (optional).
	SSHConfigPath string
	// Identity lists private key files tried before ssh_config's IdentityFile;
	// keys from ssh-agent (SSH_AUTH_SOCK) are tried first.
	Identity []string
	// KeepAlive is the keepalive interval (default 15 s); three unanswered
	// keepalives close the connection.
	KeepAlive time.Duration
	// DialTimeout bounds TCP connect plus handshake of one hop (default 15 s).
	DialTimeout time.Duration
	// Warn receives warnings (insecure policy, new host keys); nil = os.Stderr.
	Warn io.Writer
}

// maxConns caps the connections to one host. One is the norm; more are
// opened only when the server's MaxSessions (OpenSSH default 10) is reached.
const maxConns = 8

// reconnectBackoff is the wait before each dial attempt when no connection
// is up. Once a reconnection has given up (the host is unreachable), later
// ones dial once, until one succeeds: a host found lost costs each later
// command one dial, not the whole backoff again.
var reconnectBackoff = []time.Duration{0, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}

// DialSSH connects to a host over SSH and returns it as a Host. Lost
// connections are re-established with backoff for later commands; processes
// started before the loss end Done with ErrConnectionLost (their tether kills
// them on the host).
func DialSSH(ctx context.Context, cfg SSHConfig) (Host, error) {
	cfg.Name = cmp.Or(cfg.Name, cfg.Address)
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 15 * time.Second
	}
	conf, err := loadSSHConfig(cfg.SSHConfigPath)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", cfg.Name, err)
	}
	ep, err := resolve(conf, cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", cfg.Name, err)
	}
	cfg.KnownHosts = cmp.Or(cfg.KnownHosts, ep.knownHosts, filepath.Join(homeDir(), ".ssh", "known_hosts"))
	hk, err := newHostKeys(cfg.HostKeyPolicy, cfg.KnownHosts, cfg.Warn, cfg.Name)
	if err != nil {
		return nil, err
	}
	t := &sshTransport{cfg: cfg, conf: conf, ep: ep, hk: hk, listeners: map[net.Listener]struct{}{}}
	if _, err := t.conn(ctx, nil); err != nil {
		return nil, err
	}
	h := &host{name: cfg.Name, t: t}
	h.ops = shellOps{h}
	return h, nil
}

// sshTransport runs commands in sessions over a small pool of connections.
type sshTransport struct {
	cfg  SSHConfig
	conf *ssh_config.Config
	ep   endpoint
	hk   *hostKeys

	mu        sync.Mutex
	conns     []*sshConn
	closed    bool
	gaveUp    bool // the last reconnection gave up; none has succeeded since
	listeners map[net.Listener]struct{}
}

// sshConn is one connection (plus the jump hosts it runs through).
type sshConn struct {
	client  *ssh.Client
	closers []io.Closer   // jump clients, innermost last
	dead    chan struct{} // closed when the client's Wait returns
	once    sync.Once
	broken  atomic.Bool // set by close, before dead is closed
}

func (c *sshConn) isDead() bool {
	if c.broken.Load() {
		return true
	}
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

func (c *sshConn) close() {
	c.once.Do(func() {
		c.broken.Store(true)
		c.client.Close()
		for i := len(c.closers) - 1; i >= 0; i-- {
			c.closers[i].Close()
		}
	})
}

// keepalive closes the connection after three unanswered keepalives.
func (c *sshConn) keepalive(every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var pending chan error
	misses := 0
	for {
		select {
		case <-c.dead:
			return
		case <-tick.C:
		}
		if pending != nil {
			select {
			case err := <-pending:
				pending = nil
				if err != nil {
					c.close()
					return
				}
				misses = 0
			default:
				if misses++; misses >= 3 {
					c.close()
					return
				}
				continue
			}
		}
		pending = make(chan error, 1)
		go func(p chan error) {
			_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
			p <- err
		}(pending)
	}
}

// conn returns a live connection not in full, dialling one if needed: with
// backoff when none is up (reconnect), once when all are at MaxSessions.
func (t *sshTransport) conn(ctx context.Context, full map[*sshConn]bool) (*sshConn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("host %s: closed", t.cfg.Name)
	}
	t.conns = slices.DeleteFunc(t.conns, (*sshConn).isDead)
	for _, c := range t.conns {
		if !full[c] {
			return c, nil
		}
	}
	if len(t.conns) >= maxConns {
		return nil, fmt.Errorf("host %s: all %d connections are at the server's session limit (sshd MaxSessions)", t.cfg.Name, maxConns)
	}
	backoff := reconnectBackoff
	if len(t.conns) > 0 || t.gaveUp {
		backoff = backoff[:1]
	}
	var last error
	for i, d := range backoff {
		if d > 0 {
			if err := clock.Sleep(ctx, d); err != nil {
				return nil, fmt.Errorf("host %s: connecting: %w (last error: %v)", t.cfg.Name, err, last)
			}
		}
		c, err := t.dial(ctx)
		if err == nil {
			t.conns, t.gaveUp = append(t.conns, c), false
			return c, nil
		}
		last = err
		if _, ok := errors.AsType[permanentError](err); ok || ctx.Err() != nil {
			return nil, err
		}
		if i == len(backoff)-1 && len(t.conns) == 0 {
			t.gaveUp = true
			return nil, &UnreachableError{Host: t.cfg.Name, Err: fmt.Errorf("%w: %w (gave up after %s)", ErrHostUnreachable, err, attempts(len(backoff)))}
		}
	}
	return nil, last
}

// attempts is "1 attempt" or "n attempts".
func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return strconv.Itoa(n) + " attempts"
}

// dial connects to the endpoint, through its ProxyJump hops if any.
func (t *sshTransport) dial(ctx context.Context) (*sshConn, error) {
	client, closers, err := t.dialEndpoint(ctx, t.ep, nil, 0)
	if err != nil {
		return nil, err
	}
	c := &sshConn{client: client, closers: closers, dead: make(chan struct{})}
	go func() { _ = client.Wait(); c.close(); close(c.dead) }()
	go c.keepalive(t.cfg.KeepAlive)
	return c, nil
}

func (t *sshTransport) dialEndpoint(ctx context.Context, ep endpoint, via *ssh.Client, depth int) (*ssh.Client, []io.Closer, error) {
	if depth > 8 {
		return nil, nil, permanent(fmt.Errorf("host %s: ProxyJump chain deeper than 8 hops (a loop?)", t.cfg.Name))
	}
	var closers []io.Closer
	fail := func(err error) (*ssh.Client, []io.Closer, error) {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i].Close()
		}
		return nil, nil, err
	}
	if via == nil && ep.jump != "" && ep.jump != "none" {
		for i, spec := range strings.Split(ep.jump, ",") {
			hop, err := resolve(t.conf, strings.TrimSpace(spec))
			if err != nil {
				return fail(permanent(fmt.Errorf("host %s: ProxyJump %q: %w", t.cfg.Name, spec, err)))
			}
			if i > 0 {
				hop.jump = ""
			}
			c, cs, err := t.dialEndpoint(ctx, hop, via, depth+1)
			if err != nil {
				return fail(fmt.Errorf("host %s: via ProxyJump %s: %w", t.cfg.Name, spec, err))
			}
			closers = append(closers, cs...)
			closers = append(closers, c)
			via = c
		}
	}
	dctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	var nc net.Conn
	var err error
	if via != nil {
		nc, err = via.DialContext(dctx, "tcp", ep.hostport())
	} else {
		nc, err = (&net.Dialer{}).DialContext(dctx, "tcp", ep.hostport())
	}
	if err != nil {
		return fail(fmt.Errorf("host %s: connect %s: %w", t.cfg.Name, ep.hostport(), err))
	}
	auth, err := loadAuth(t.cfg.Identity, ep)
	if err != nil {
		nc.Close()
		return fail(fmt.Errorf("host %s: %w", t.cfg.Name, err))
	}
	defer auth.closeFn()
	var hkErr error
	check := t.hk.callback()
	cc := &ssh.ClientConfig{
		User: ep.user,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(auth.signers...)},
		HostKeyCallback: func(h string, r net.Addr, k ssh.PublicKey) error {
			hkErr = check(h, r, k)
			return hkErr
		},
		HostKeyAlgorithms: t.hk.algorithms(ep.hostport()),
	}
	stop := context.AfterFunc(dctx, func() { nc.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(nc, ep.hostport(), cc)
	if !stop() {
		if err == nil {
			sc.Close()
		}
		return fail(fmt.Errorf("host %s: handshake with %s: %w", t.cfg.Name, ep.hostport(), dctx.Err()))
	}
	if err != nil {
		nc.Close()
		switch {
		case hkErr != nil:
			return fail(hkErr)
		case strings.Contains(err.Error(), "unable to authenticate"):
			return fail(permanent(fmt.Errorf("host %s: authentication as %s at %s failed: %w (%s)",
				t.cfg.Name, ep.user, ep.hostport(), err, strings.Join(auth.notes, "; "))))
		}
		return fail(fmt.Errorf("host %s: handshake with %s: %w", t.cfg.Name, ep.hostport(), err))
	}
	return ssh.NewClient(sc, chans, reqs), closers, nil
}

// session opens a session, opening another connection when the server
// refuses more sessions on the existing ones, and redialling broken ones.
func (t *sshTransport) session(ctx context.Context) (*ssh.Session, *sshConn, error) {
	full := map[*sshConn]bool{}
	var last error
	for range maxConns + 2 {
		c, err := t.conn(ctx, full)
		if err != nil {
			return nil, nil, err
		}
		s, err := c.client.NewSession()
		if err == nil {
			return s, c, nil
		}
		last = err
		if _, ok := errors.AsType[*ssh.OpenChannelError](err); ok {
			full[c] = true
			continue
		}
		c.close()
	}
	return nil, nil, fmt.Errorf("host %s: opening a session: %w", t.cfg.Name, last)
}
