package orchestrator

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/shquote"
)

// fleet is the hosts of one sweep and mbench's connections to them: it dials
// each host once and learns its home directory (or asks Slurm for an
// allocation), places the sweep's state directory on it, puts mbench and the
// vLLM plugin there, remembers where and which tunnels are open, says where
// each host's processes run and how mbench reaches them, and closes it all.
// It starts no engine itself.
type fleet struct {
	*sweepLog
	m       *matrices.Matrix
	self    string   // this mbench binary, uploaded to remote hosts
	selfEnv []string // environment of processes started from it (tests)
	dir     string   // the results directory; a local host's state lives under dir/.state
	sweepID string   // names the sweep's state directory on remote hosts
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
	// lost are the hosts that stopped answering, with why (hostlost.go):
	// nothing more runs there.
	lost map[string]error
}

// newFleet is the fleet of a sweep of m into the results directory dir; of
// opts it takes the mbench binary (Self, SelfEnv), the Slurm job mbench runs
// in and where connection warnings go (Stderr).
func newFleet(m *matrices.Matrix, dir, sweepID string, log *sweepLog, opts Options) *fleet {
	warn := cmp.Or(opts.Stderr, io.Discard)
	return &fleet{sweepLog: log, m: m, sweepID: sweepID, self: opts.Self, selfEnv: opts.SelfEnv, slurmJob: opts.SlurmJob, dir: dir, warn: warn, dial: hosts.DialSSH,
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
	dial := f.dialMachine
	if hc.IsSlurm() {
		dial = f.dialSlurm
	}
	h, err := dial(ctx, name)
	if err != nil {
		return nil, err
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
	h, err := f.dial(ctx, hosts.SSHConfig{Name: name, Address: hc.Address, HostKeyPolicy: hc.HostKeyPolicy, Warn: f.warn, DialTimeout: hc.ConnectTimeout})
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
	f.homes[name] = hosts.LastLine(out) // a chatty login shell may print first
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
	wd := cmp.Or(f.m.Hosts[hostName].Workdir, "~/.mbench")
	if wd == "~" || strings.HasPrefix(wd, "~/") {
		wd = f.homes[hostName] + strings.TrimPrefix(wd, "~")
	}
	return wd
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
	maps.DeleteFunc(f.tunnels, func(k, _ string) bool { return strings.HasPrefix(k, name+":") })
}

// close closes every connection (their tunnels go with them).
func (f *fleet) close() {
	for _, h := range f.conns {
		h.Close()
	}
}

// runtime gives the matrices package what it needs to render commands.
func (f *fleet) runtime() matrices.Runtime {
	return matrices.Runtime{
		Self: func(h string) string {
			if p, ok := f.selfOn(h); ok {
				return p
			}
			return f.self
		},
		StepLog: func(h string, i int) string { return f.path(h, "steps", fmt.Sprintf("engine_step.%d.jsonl", i)) },
		Bind:    f.bind(),
		Node:    f.nodeOf,
	}
}

// prepare connects to every host the sweep uses, uploads mbench where
// the simulated engine runs remotely, and stops engines a crashed earlier
// run of this sweep left behind.
func (f *fleet) prepare(ctx context.Context) error {
	for _, name := range f.m.HostOrder {
		if !f.hostUsed(name) {
			continue
		}
		h, err := f.host(ctx, name)
		if err != nil {
			return err
		}
		if _, _, err := h.Run(ctx, "mkdir -p "+shquote.Quote(f.path(name, "steps"))+" "+shquote.Quote(f.path(name, "logs"))); err != nil {
			return fmt.Errorf("host %s: create the sweep's state directory: %w", name, err)
		}
		left, err := hosts.StopLeftovers(ctx, h, f.path(name, "pids"), f.sweepID, 5*time.Second)
		if err != nil {
			return fmt.Errorf("host %s: stop engines left by an earlier run: %w", name, err)
		}
		for _, l := range left {
			f.logf("host %s: stopped leftover engine from an earlier run: %+v", name, l)
		}
		if !isLocal(f.m.Hosts[name].Address) {
			if err := f.uploadSelf(ctx, name, h); err != nil {
				if f.m.Engine.Kind == matrices.EngineSim {
					return err
				}
				f.logf("host %s: %v: remote probes and {{.Self}} commands are off on this host", name, err)
			}
		}
		if f.m.Engine.Kind == matrices.EngineVLLM && f.m.Engine.Instrument {
			if err := f.installPlugin(ctx, name, h); err != nil {
				return err
			}
		}
	}
	return nil
}

// hostUsed reports whether a config's engines or router run on the host.
func (f *fleet) hostUsed(name string) bool {
	return slices.ContainsFunc(f.m.ConfigOrder, func(c string) bool { return slices.Contains(f.configHosts(c), name) })
}

// uploadSelf makes this mbench binary available on a remote host, for the
// simulated engine, the router subcommand and remote probes: hosts.X.mbench_path
// when set, else a copy in the sweep's state directory, uploaded unless the
// copy there already has the same SHA-256 (a resumed sweep). The host must
// run the same OS and architecture as this binary.
func (f *fleet) uploadSelf(ctx context.Context, name string, h hosts.Host) error {
	hc := f.m.Hosts[name]
	if hc.MbenchPath != "" {
		f.selfPath[name] = hc.MbenchPath
		return nil
	}
	if f.self == "" {
		return fmt.Errorf("host %s: no mbench binary to upload (set hosts.%s.mbench_path)", name, name)
	}
	out, _, err := h.Run(ctx, "uname -sm")
	if err != nil {
		return fmt.Errorf("host %s: uname: %w", name, err)
	}
	if want := unameOf(runtime.GOOS, runtime.GOARCH); hosts.LastLine(out) != want {
		return fmt.Errorf("host %s is %q but this mbench is built for %q; build mbench for the host and set hosts.%s.mbench_path",
			name, hosts.LastLine(out), want, name)
	}
	bin, err := os.Open(f.self)
	if err != nil {
		return fmt.Errorf("open mbench binary %s for upload: %w", f.self, err)
	}
	defer bin.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, bin); err != nil {
		return fmt.Errorf("read mbench binary %s: %w", f.self, err)
	}
	digest := hex.EncodeToString(sum.Sum(nil))
	dst := f.path(name, "bin", "mbench")
	q := shquote.Quote(dst)
	if out, _, err := h.Run(ctx, "[ -x "+q+" ] && sha256sum -- "+q+" 2>/dev/null"); err == nil && strings.HasPrefix(hosts.LastLine(out), digest) {
		f.selfPath[name] = dst
		return nil
	}
	if _, err := bin.Seek(0, io.SeekStart); err != nil {
		return err
	}
	f.logf("host %s: uploading mbench to %s", name, dst)
	if err := h.Put(ctx, bin, dst, 0o755); err != nil {
		return fmt.Errorf("host %s: upload mbench to %s: %w", name, dst, err)
	}
	f.selfPath[name] = dst
	return nil
}

// unameOf is `uname -sm` of a machine that runs binaries for goos/goarch.
func unameOf(goos, goarch string) string {
	sys := cmp.Or(map[string]string{"linux": "Linux", "darwin": "Darwin", "freebsd": "FreeBSD"}[goos], goos)
	arch := cmp.Or(map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686"}[goarch], goarch)
	if goos == "darwin" && goarch == "arm64" {
		arch = "arm64"
	}
	return sys + " " + arch
}
