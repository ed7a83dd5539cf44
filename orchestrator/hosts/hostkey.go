package hosts

import (
	"cmp"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Host key policies for SSHConfig.HostKeyPolicy.
const (
	// PolicyStrict refuses hosts whose key is not in known_hosts (the default).
	PolicyStrict = "strict"
	// PolicyAcceptNew records unknown hosts in known_hosts, like OpenSSH's
	// StrictHostKeyChecking=accept-new; a changed key is still refused.
	PolicyAcceptNew = "accept-new"
	// PolicyInsecure accepts any key and warns on every connection.
	PolicyInsecure = "insecure"
)

// knownHostsMu serialises appends to known_hosts files within this process.
var knownHostsMu sync.Mutex

// hostKeys checks server keys for one policy and known_hosts file.
type hostKeys struct {
	policy string
	file   string
	warn   io.Writer
	name   string // host name for messages
}

func newHostKeys(policy, file string, warn io.Writer, name string) (*hostKeys, error) {
	policy = cmp.Or(policy, PolicyStrict)
	if !slices.Contains([]string{PolicyStrict, PolicyAcceptNew, PolicyInsecure}, policy) {
		return nil, permanent(fmt.Errorf("host %s: host_key_policy %q: want strict, accept-new or insecure", name, policy))
	}
	return &hostKeys{policy: policy, file: file, warn: cmp.Or(warn, io.Writer(os.Stderr)), name: name}, nil
}

// load reads the known_hosts file; a missing file knows no host.
func (k *hostKeys) load() (ssh.HostKeyCallback, error) {
	cb, err := knownhosts.New(k.file)
	if errors.Is(err, os.ErrNotExist) {
		return func(string, net.Addr, ssh.PublicKey) error { return &knownhosts.KeyError{} }, nil
	}
	if err != nil {
		return nil, permanent(fmt.Errorf("known_hosts %s: %w", k.file, err))
	}
	return cb, nil
}

var (
	probeKeyOnce sync.Once
	probeKey     ssh.PublicKey
)

// algorithms returns the host key algorithms that known_hosts holds for
// hostport, so that the server presents a key we can check (as OpenSSH does);
// nil when none is known.
func (k *hostKeys) algorithms(hostport string) []string {
	if k.policy == PolicyInsecure {
		return nil
	}
	cb, err := k.load()
	if err != nil {
		return nil
	}
	probeKeyOnce.Do(func() {
		pub, _, _ := ed25519.GenerateKey(nil)
		probeKey, _ = ssh.NewPublicKey(pub)
	})
	var ke *knownhosts.KeyError
	if !errors.As(cb(hostport, addrString(hostport), probeKey), &ke) {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	for _, w := range ke.Want {
		t := w.Key.Type()
		names := []string{t}
		if t == ssh.KeyAlgoRSA {
			names = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				algos = append(algos, n)
			}
		}
	}
	return algos
}

// callback returns the ssh.HostKeyCallback enforcing the policy.
func (k *hostKeys) callback() ssh.HostKeyCallback {
	return func(hostport string, remote net.Addr, key ssh.PublicKey) error {
		fp := ssh.FingerprintSHA256(key)
		if k.policy == PolicyInsecure {
			fmt.Fprintf(k.warn, "mbench: WARNING: host %s (%s): host key NOT verified (host_key_policy: insecure); server key %s %s\n",
				k.name, hostport, key.Type(), fp)
			return nil
		}
		cb, err := k.load()
		if err != nil {
			return err
		}
		err = cb(hostport, remote, key)
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &re):
			return permanent(fmt.Errorf("host %s (%s): host key %s %s is revoked in %s:%d",
				k.name, hostport, key.Type(), fp, re.Revoked.Filename, re.Revoked.Line))
		case errors.As(err, &ke) && len(ke.Want) > 0:
			var known []string
			for _, w := range ke.Want {
				known = append(known, fmt.Sprintf("%s:%d (%s %s)", w.Filename, w.Line, w.Key.Type(), ssh.FingerprintSHA256(w.Key)))
			}
			return permanent(fmt.Errorf("host %s (%s): HOST KEY MISMATCH: the server presented %s %s but known_hosts has %s; "+
				"this may be a man-in-the-middle attack. If the host was reinstalled, remove the old entry "+
				"(ssh-keygen -R %s -f %s) and reconnect", k.name, hostport, key.Type(), fp, strings.Join(known, ", "),
				knownhosts.Normalize(hostport), k.file))
		case errors.As(err, &ke) && k.policy == PolicyAcceptNew:
			if err := k.appendKey(hostport, key); err != nil {
				return permanent(fmt.Errorf("host %s (%s): recording new host key in %s: %w", k.name, hostport, k.file, err))
			}
			fmt.Fprintf(k.warn, "mbench: host %s (%s): added new host key %s %s to %s\n", k.name, hostport, key.Type(), fp, k.file)
			return nil
		case errors.As(err, &ke):
			host, port, serr := net.SplitHostPort(hostport)
			if serr != nil {
				host, port = hostport, "22"
			}
			return permanent(fmt.Errorf("host %s (%s): host key %s %s is not in %s and host_key_policy is strict: "+
				"check the fingerprint and add the key (e.g. ssh-keyscan -p %s %s >> %s), or set host_key_policy: accept-new",
				k.name, hostport, key.Type(), fp, k.file, port, host, k.file))
		default:
			return permanent(fmt.Errorf("host %s (%s): checking host key: %w", k.name, hostport, err))
		}
	}
}

// appendKey records key for hostport in the known_hosts file.
func (k *hostKeys) appendKey(hostport string, key ssh.PublicKey) error {
	knownHostsMu.Lock()
	defer knownHostsMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(k.file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(k.file, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(hostport)}, key) + "\n"
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, st.Size()-1); err == nil && b[0] != '\n' {
			line = "\n" + line // the entry starts on its own line
		}
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// addrString is a net.Addr for a "host:port" string.
type addrString string

func (a addrString) Network() string { return "tcp" }
func (a addrString) String() string  { return string(a) }
