package orchestrator

import (
	"context"
	"fmt"
	"io"
	"net"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
)

// fleet is the hosts of one sweep and mbench's connections to them: it dials
// each host once and learns its home directory, places the sweep's state
// directory on it, remembers where mbench and the vLLM plugin were put there
// and which tunnels are open, and closes it all. It starts no process itself.
type fleet struct {
	m       *matrices.Matrix
	dir     string // the results directory; a local host's state lives under dir/.state
	sweepID string // names the sweep's state directory on remote hosts
	warn    io.Writer
	// slurmJob is the Slurm job mbench runs inside ("" outside one): a
	// local slurm host uses it rather than asking for its own.
	slurmJob string
	// dial connects to a remote host; tests give a fake.
	dial func(ctx context.Context, cfg hosts.SSHConfig) (hosts.Host, error)

	conns     map[string]hosts.Host
	homes     map[string]string // remote $HOME, learnt at dial
	selfPath  map[string]string // mbench on the host
	pluginDir map[string]string // mbench_vllm on the host
	tunnels   map[string]string // "host:port" → local forwarded address
}

func newFleet(m *matrices.Matrix, dir string, warn io.Writer) *fleet {
	return &fleet{m: m, dir: dir, warn: warn, dial: hosts.DialSSH,
		conns: map[string]hosts.Host{}, homes: map[string]string{}, selfPath: map[string]string{},
		pluginDir: map[string]string{}, tunnels: map[string]string{}}
}

// host returns the connection to a host of the matrix, dialling on first use.
func (f *fleet) host(ctx context.Context, name string) (hosts.Host, error) {
	if h, ok := f.conns[name]; ok {
		return h, nil
	}
	hc, ok := f.m.Hosts[name]
	if !ok {
		return nil, fmt.Errorf("unknown host %q", name)
	}
	var h hosts.Host
	if hc.IsSlurm() {
		var err error
		if h, err = f.dialSlurm(ctx, name); err != nil {
			return nil, err
		}
	} else {
		var err error
		if h, err = f.dialMachine(ctx, name); err != nil {
			return nil, err
		}
	}
	f.conns[name] = h
	return h, nil
}

// dialMachine connects to the machine a host's address names: this one for
// a local address, else over SSH, learning the remote $HOME. For a slurm
// host that is its login machine.
func (f *fleet) dialMachine(ctx context.Context, name string) (hosts.Host, error) {
	hc := f.m.Hosts[name]
	if isLocal(hc.Address) {
		return hosts.NewLocal(), nil
	}
	h, err := f.dial(ctx, hosts.SSHConfig{Name: name, Address: hc.Address, HostKeyPolicy: hc.HostKeyPolicy, Warn: f.warn})
	if err != nil {
		if !strings.Contains(err.Error(), "host "+name) {
			err = fmt.Errorf("host %s (%s): %w", name, hc.Address, err)
		}
		return nil, err
	}
	out, _, err := h.Run(ctx, `printf '%s\n' "$HOME"`)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("host %s: find home directory: %w", name, err)
	}
	f.homes[name] = lastLine(out) // a chatty login shell may print first
	return h, nil
}

// connected returns the open connection to a host, if any.
func (f *fleet) connected(name string) (hosts.Host, bool) {
	h, ok := f.conns[name]
	return h, ok
}

// path is a path under the sweep's state directory on a host: the results
// directory's .state locally, <workdir>/<sweep id> remotely. mbench deletes
// nothing outside it.
func (f *fleet) path(hostName string, parts ...string) string {
	hc := f.m.Hosts[hostName]
	if isLocal(hc.Address) {
		return filepath.Join(append([]string{f.dir, ".state"}, parts...)...)
	}
	return path.Join(append([]string{f.workdir(hostName), f.sweepID}, parts...)...)
}

// workdir is a remote host's work directory with a leading ~ expanded to
// the remote $HOME (learnt when the host was dialled).
func (f *fleet) workdir(hostName string) string {
	wd := f.m.Hosts[hostName].Workdir
	if wd == "" {
		wd = "~/.mbench"
	}
	if wd == "~" || strings.HasPrefix(wd, "~/") {
		wd = f.homes[hostName] + strings.TrimPrefix(wd, "~")
	}
	return wd
}

// reach returns the base URL at which mbench reaches port on a host: loopback
// for the local host, an SSH tunnel when the host asks for one, else the
// host's address.
func (f *fleet) reach(ctx context.Context, hostName string, port int) (string, error) {
	return f.reachNode(ctx, hostName, 0, port)
}

// reachNode is reach for port on node node of a slurm host's allocation
// (other hosts have node 0 only).
func (f *fleet) reachNode(ctx context.Context, hostName string, node, port int) (string, error) {
	hc, ok := f.m.Hosts[hostName]
	if ok && hc.IsSlurm() {
		return f.slurmReach(ctx, hostName, node, port)
	}
	if !ok || isLocal(hc.Address) {
		return "http://127.0.0.1:" + strconv.Itoa(port), nil
	}
	if !hc.Tunnel {
		return "http://" + net.JoinHostPort(netHost(hc.Address), strconv.Itoa(port)), nil
	}
	h, err := f.host(ctx, hostName)
	if err != nil {
		return "", err
	}
	key := hostName + ":" + strconv.Itoa(port)
	if a, ok := f.tunnels[key]; ok {
		return "http://" + a, nil
	}
	a, err := h.Forward(ctx, "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return "", fmt.Errorf("host %s: tunnel to port %d: %w", hostName, port, err)
	}
	f.tunnels[key] = a
	return "http://" + a, nil
}

// drop closes the connection to one host and forgets it and its tunnels;
// the next use dials it again.
func (f *fleet) drop(name string) {
	h, ok := f.conns[name]
	if !ok {
		return
	}
	h.Close()
	delete(f.conns, name)
	for k := range f.tunnels {
		if strings.HasPrefix(k, name+":") {
			delete(f.tunnels, k)
		}
	}
}

// close closes every connection (their tunnels go with them).
func (f *fleet) close() {
	for _, h := range f.conns {
		h.Close()
	}
}
