package hosts

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kevinburke/ssh_config"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// endpoint is one SSH destination after ssh_config resolution.
type endpoint struct {
	alias      string   // the host part as given (the ssh_config Host pattern it matched)
	host, port string   // where to connect
	user       string   // remote user
	identities []string // IdentityFile entries, tokens expanded
	jump       string   // ProxyJump value ("" or "none": direct)
	knownHosts string   // UserKnownHostsFile (first), tokens expanded
}

func (e endpoint) hostport() string { return net.JoinHostPort(e.host, e.port) }

// parseAddress splits "[user@]host[:port]"; IPv6 literals need brackets to
// carry a port.
func parseAddress(s string) (usr, host, port string, err error) {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "@"); i >= 0 {
		usr, s = s[:i], s[i+1:]
		if usr == "" {
			return "", "", "", fmt.Errorf("address %q: empty user before '@'", s)
		}
	}
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return "", "", "", fmt.Errorf("address %q: missing ']'", s)
		}
		host, rest := s[1:end], s[end+1:]
		if rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return "", "", "", fmt.Errorf("address %q: unexpected %q after ']'", s, rest)
			}
			port = p
		}
		s = host
	case strings.Count(s, ":") == 1:
		s, port, _ = strings.Cut(s, ":")
	}
	host = s
	if host == "" || strings.ContainsAny(host, " \t\r\n/\\'\"`$;&|<>()") {
		return "", "", "", fmt.Errorf("address %q: invalid host %q (want [user@]host[:port] or an ssh_config alias)", s, host)
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", "", "", fmt.Errorf("address %q: invalid port %q (want 1-65535)", s, port)
		}
	}
	return usr, host, port, nil
}

// loadSSHConfig parses path (default ~/.ssh/config); a missing file is empty.
func loadSSHConfig(path string) (*ssh_config.Config, error) {
	explicit := path != ""
	if !explicit {
		path = filepath.Join(homeDir(), ".ssh", "config")
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !explicit {
			return ssh_config.DecodeBytes(nil)
		}
		return nil, fmt.Errorf("ssh config: %w", err)
	}
	defer f.Close()
	c, err := ssh_config.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("ssh config %s: %w", path, err)
	}
	return c, nil
}

// resolve applies ssh_config (HostName, User, Port, IdentityFile, ProxyJump,
// UserKnownHostsFile) to an address; values in the address win.
func resolve(c *ssh_config.Config, addr string) (endpoint, error) {
	usr, host, port, err := parseAddress(addr)
	if err != nil {
		return endpoint{}, err
	}
	get := func(key string) string {
		v, _ := c.Get(host, key)
		return strings.TrimSpace(v)
	}
	ep := endpoint{alias: host, host: host, port: port, user: usr}
	if hn := get("HostName"); hn != "" {
		ep.host = expandTokens(hn, ep)
	}
	ep.port = cmp.Or(ep.port, get("Port"), "22")
	if n, err := strconv.Atoi(ep.port); err != nil || n < 1 || n > 65535 {
		return endpoint{}, fmt.Errorf("ssh config for %s: invalid Port %q", host, ep.port)
	}
	ep.user = cmp.Or(ep.user, get("User"), localUser())
	ids, _ := c.GetAll(host, "IdentityFile")
	for _, id := range ids {
		ep.identities = append(ep.identities, expandTokens(strings.TrimSpace(id), ep))
	}
	ep.jump = get("ProxyJump")
	if kh := strings.Fields(get("UserKnownHostsFile")); len(kh) > 0 && kh[0] != "none" {
		ep.knownHosts = expandTokens(kh[0], ep)
	}
	return ep, nil
}

// expandTokens expands ~ and the ssh_config tokens %d %u %h %r %p %n %%.
func expandTokens(s string, ep endpoint) string {
	if s == "~" {
		return homeDir()
	}
	if rest, ok := strings.CutPrefix(s, "~/"); ok {
		s = homeDir() + "/" + rest
	}
	if !strings.Contains(s, "%") {
		return s
	}
	r := strings.NewReplacer("%%", "%", "%d", homeDir(), "%u", localUser(), "%h", ep.host,
		"%r", ep.user, "%p", ep.port, "%n", ep.alias)
	return r.Replace(s)
}

func homeDir() string {
	if h, err := os.UserHomeDir(); err == nil {
		return h
	}
	return "/"
}

func localUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}

// authConfig gathers signers from ssh-agent (SSH_AUTH_SOCK) and identity
// files. explicit files must exist; ssh_config ones are skipped with a note.
type authConfig struct {
	signers []ssh.Signer
	notes   []string // why keys were skipped, for the auth-failure message
	closeFn func()
}

func loadAuth(explicit []string, ep endpoint) (*authConfig, error) {
	a := &authConfig{closeFn: func() {}}
	haveAgent := false
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			a.notes = append(a.notes, fmt.Sprintf("ssh-agent at SSH_AUTH_SOCK=%s unreachable: %v", sock, err))
		} else if ss, err := agent.NewClient(conn).Signers(); err != nil {
			conn.Close()
			a.notes = append(a.notes, fmt.Sprintf("ssh-agent: %v", err))
		} else {
			haveAgent = true
			a.signers = append(a.signers, ss...)
			a.closeFn = func() { conn.Close() }
			a.notes = append(a.notes, fmt.Sprintf("ssh-agent offered %d key(s)", len(ss)))
		}
	}
	files := make([]string, 0, len(explicit)+len(ep.identities))
	for _, f := range explicit {
		files = append(files, expandTokens(f, ep))
	}
	files = append(files, ep.identities...)
	useDefaults := len(files) == 0
	if useDefaults {
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			files = append(files, filepath.Join(homeDir(), ".ssh", n))
		}
	}
	var encrypted []string
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if i < len(explicit) {
				a.closeFn()
				return nil, permanent(fmt.Errorf("identity file %s: %w", f, err))
			}
			if !useDefaults {
				a.notes = append(a.notes, fmt.Sprintf("IdentityFile %s: %v", f, err))
			}
			continue
		}
		s, err := ssh.ParsePrivateKey(b)
		switch _, noPassphrase := errors.AsType[*ssh.PassphraseMissingError](err); {
		case noPassphrase:
			encrypted = append(encrypted, f)
			if haveAgent {
				a.notes = append(a.notes, fmt.Sprintf("identity file %s is encrypted; relying on ssh-agent for it", f))
			}
		case err != nil:
			a.notes = append(a.notes, fmt.Sprintf("identity file %s: %v", f, err))
		default:
			a.signers = append(a.signers, s)
		}
	}
	if len(encrypted) > 0 && !haveAgent && len(a.signers) == 0 {
		a.closeFn()
		return nil, permanent(fmt.Errorf("identity file %s is encrypted (passphrase-protected) and no ssh-agent is available "+
			"(SSH_AUTH_SOCK is unset or unreachable): start ssh-agent and run `ssh-add %s`, or use an unencrypted key",
			strings.Join(encrypted, ", "), encrypted[0]))
	}
	if len(encrypted) > 0 && !haveAgent {
		a.notes = append(a.notes, fmt.Sprintf("identity file %s is encrypted and no ssh-agent is available", strings.Join(encrypted, ", ")))
	}
	if len(a.signers) == 0 {
		a.closeFn()
		return nil, permanent(fmt.Errorf("no usable SSH key for %s@%s: no ssh-agent (SSH_AUTH_SOCK) and no identity file "+
			"(tried %s); set IdentityFile in ssh_config or an identity in the matrix", ep.user, ep.alias, strings.Join(files, ", ")))
	}
	return a, nil
}

// permanentError marks failures that retrying cannot fix (auth, host keys, config).
type permanentError struct{ error }

func (p permanentError) Unwrap() error { return p.error }

func permanent(err error) error { return permanentError{err} }

// ResolveHostName returns the network host that address connects to after
// ssh_config resolution (sshConfigPath "" means ~/.ssh/config): the
// HostName of an alias, else the host part of [user@]host[:port]. It dials
// nothing. With ProxyJump the name may only be reachable through the jump.
func ResolveHostName(sshConfigPath, address string) (string, error) {
	conf, err := loadSSHConfig(sshConfigPath)
	if err != nil {
		return "", err
	}
	ep, err := resolve(conf, address)
	if err != nil {
		return "", err
	}
	return ep.host, nil
}
