package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mbench/mbench/internal/clock"
	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
)

// engineProc is one started process of an engine set: an instance or the
// router.
type engineProc struct {
	name     string
	hostName string
	host     hosts.Host
	proc     hosts.Process
	url      string // base URL as reachable from mbench
	stepLog  string // engine_step.jsonl path on the host ("" for a router)
	logPath  string // engine log on the host
	command  string // the command it runs (for errors)
	index    int
	node     int // the node of a slurm host's allocation it runs on
}

// engineSet is the running engine(s) of one launch spec.
type engineSet struct {
	launch  *matrices.Launch
	procs   []*engineProc
	router  *engineProc
	targets []string // where the load goes: the router, or every instance
	started time.Time
	vocab   int // the instances' vocabulary size, where the kind says it (0 = unknown)
}

// dead reports the first process of the set that has exited.
func (es *engineSet) dead() *engineProc {
	for _, p := range es.all() {
		select {
		case <-p.proc.Done():
			return p
		default:
		}
	}
	return nil
}

func (es *engineSet) all() []*engineProc {
	out := append([]*engineProc(nil), es.procs...)
	if es.router != nil {
		out = append(out, es.router)
	}
	return out
}

// launcher starts the engine sets a sweep's runs need, keeps the one that
// runs, and stops it. What each host is and how it is reached is the
// fleet's.
type launcher struct {
	*sweepLog
	m       *matrices.Matrix
	fleet   *fleet
	marker  string   // the sweep id: every process's pidfile and environment carry it
	seed    int64    // the sweep seed: a sim launch's seed derives from it and the run
	selfEnv []string // environment of processes started from the mbench binary (tests)

	cur      *engineSet // the running set, nil when none runs
	launches int        // engine sets launched so far: names their logs
}

// stop stops the running set, if any. Its processes on a host that stopped
// answering are left to their tether (which ends them when mbench's
// connection goes): a stop there would only spend the reconnection's
// attempts again.
func (e *launcher) stop(ctx context.Context) error {
	es := e.cur
	e.cur = nil
	if es != nil && len(e.fleet.lost) > 0 {
		kept := *es
		kept.procs = slices.DeleteFunc(slices.Clone(es.procs), func(p *engineProc) bool { return e.fleet.isLost(p.hostName) })
		kept.router = nil
		if es.router != nil && !e.fleet.isLost(es.router.hostName) {
			kept.router = es.router
		}
		es = &kept
	}
	return stopSet(ctx, es)
}

// start starts every instance of l (staggered), then the router, and waits
// until all are ready; the set is then the running one. run names the run
// it is launched for (a sim draws its launch noise from it, so a resumed
// sweep launches with the same seeds). On any failure it stops what it
// started and returns an error that names the command and quotes its log
// tail.
func (e *launcher) start(ctx context.Context, l *matrices.Launch, run string) (*engineSet, error) {
	es := &engineSet{launch: l, started: time.Now()}
	e.launches++
	fail := func(err error) (*engineSet, error) {
		sctx, cancel := teardownContext(ctx) // bounded after an interrupt, as after a run
		defer cancel()
		stopSet(sctx, es)
		return nil, err
	}
	for i, inst := range l.Instances {
		if i > 0 && l.Stagger > 0 {
			if err := clock.Sleep(ctx, l.Stagger); err != nil {
				return fail(err)
			}
		}
		command := inst.Command
		if dir, ok := e.fleet.pluginDir[inst.Host]; ok && l.Instrument {
			command = instrumentCommand(dir, command)
		}
		if e.m.Engine.Kind == matrices.EngineSim {
			// Each launch of the simulated engine draws its own launch
			// noise, from the sweep seed and the run it is launched for, so
			// a resumed sweep launches with the same seeds.
			command += fmt.Sprintf(" --seed=%d", runSeed(e.seed, run, i))
		}
		node := e.m.Hosts[inst.Host].SlurmNode(inst.Index, inst.GPUs)
		p, err := e.startProc(ctx, inst.Host, node, fmt.Sprintf("engine-%s-%d", inst.Host, inst.Index), command, inst.Env, inst.Port, len(inst.GPUs))
		if err != nil {
			return fail(err)
		}
		p.index = inst.Index
		if profileOf(e.m).WritesSteps(l.Instrument) {
			p.stepLog = inst.StepLog
		}
		es.procs = append(es.procs, p)
	}
	for i, p := range es.procs {
		inst := l.Instances[i]
		if err := e.waitReady(ctx, p, profileOf(e.m).ReadyPath, l.ReadyTimeout); err != nil {
			return fail(err)
		}
		if inst.BootstrapPort > 0 {
			u, err := e.fleet.reachNode(ctx, p.hostName, p.node, inst.BootstrapPort)
			if err != nil {
				return fail(err)
			}
			bp := &engineProc{name: p.name + " bootstrap", hostName: p.hostName, host: p.host, proc: p.proc, url: u, logPath: p.logPath}
			if err := e.waitReady(ctx, bp, bootstrapQueryPath, l.ReadyTimeout); err != nil {
				return fail(err)
			}
		}
	}
	if r := l.Router; r != nil {
		p, err := e.startProc(ctx, r.Host, 0, "router-"+r.Host, r.Command, r.Env, r.Port, 0)
		if err != nil {
			return fail(err)
		}
		es.router = p
		if err := e.waitReady(ctx, p, r.ReadyPath, l.ReadyTimeout); err != nil {
			return fail(err)
		}
		es.targets = []string{p.url}
	} else {
		for _, p := range es.procs {
			es.targets = append(es.targets, p.url)
		}
	}
	e.cur = es
	return es, nil
}

// startProc checks that the port is free, then starts one process (on node
// node of a slurm host's allocation).
func (e *launcher) startProc(ctx context.Context, hostName string, node int, name, command string, env []matrices.EnvVar, port, gpus int) (*engineProc, error) {
	h, err := e.fleet.host(ctx, hostName)
	if err != nil {
		return nil, err
	}
	u, err := e.fleet.reachNode(ctx, hostName, node, port)
	if err != nil {
		return nil, err
	}
	// A process just stopped (an engine of the previous run, a leftover a
	// crashed mbench left) can hold its port for a moment while the
	// kernel tears it down: the port is given portFreeWait to free before
	// the sweep stops on it.
	if busy, use := awaitFreePort(ctx, portFreeWait, portPoll, func() (bool, string) {
		return e.portInUse(ctx, hostName, node, h, u, port)
	}); busy {
		return nil, fmt.Errorf("host %s: port %d: %w by another process (%s); stop it or change engine.port in the matrix (below the host's ephemeral port range, /proc/sys/net/ipv4/ip_local_port_range)",
			hostName, port, errPortInUse, use)
	}
	logPath := e.fleet.path(hostName, "logs", fmt.Sprintf("%s.%d.log", name, e.launches))
	spec := hosts.ProcSpec{
		Name:     name,
		Command:  command,
		Env:      toHostEnv(env, e.selfEnv),
		LogPath:  logPath,
		StateDir: e.fleet.path(hostName, "pids"),
		Marker:   e.marker,
		Tether:   true,
		GPUs:     gpus,
		Node:     node,
	}
	e.tracef("start %s on %s: %s", name, hostName, command)
	proc, err := h.Start(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("start %s on host %s (%s): %w", name, hostName, e.redact(command), err)
	}
	return &engineProc{name: name, hostName: hostName, host: h, proc: proc, url: u, logPath: logPath, command: command, node: node}, nil
}

// toHostEnv is a process's environment: the rendered env plus SelfEnv
// (empty outside tests, where it makes the test binary act as mbench for
// {{.Self}} commands).
func toHostEnv(env []matrices.EnvVar, selfEnv []string) []hosts.Env {
	out := make([]hosts.Env, 0, len(env)+len(selfEnv))
	for _, e := range env {
		out = append(out, hosts.Env{Name: e.Name, Value: e.Value})
	}
	for _, kv := range selfEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out = append(out, hosts.Env{Name: k, Value: v})
		}
	}
	return out
}

// Readiness polls start at readyFirstPoll and double up to readyMaxPoll: an
// engine that is up in 50 ms is seen within a few ms of it, and one that
// loads for minutes costs ten polls a second.
const (
	readyFirstPoll = 5 * time.Millisecond
	readyMaxPoll   = 100 * time.Millisecond
)

// waitReady polls url+path until it answers 200, the process exits, or the
// timeout passes.
func (e *launcher) waitReady(ctx context.Context, p *engineProc, path string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	wait := readyFirstPoll
	// notReady is the error of a process that never became ready, quoting its log.
	notReady := func(fallback, what string) error {
		tail := e.redact(logExcerpt(p.proc.LogTail(context.WithoutCancel(ctx), excerptScan), 20))
		return &startError{cause: logCause(tail, fallback), logPath: p.logPath, hostName: p.hostName,
			msg: fmt.Sprintf("%s on host %s%s; command: %s; last lines of %s:\n%s", p.name, p.hostName, what, e.redact(p.command), p.logPath, tail)}
	}
	for {
		select {
		case <-p.proc.Done():
			return notReady(fmt.Sprint(p.proc.Err()), fmt.Sprintf(" exited before it was ready (%v)", p.proc.Err()))
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path, nil)
		if resp, err := client.Do(req); err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && (path != bootstrapQueryPath || bootstrapRegistered(body)) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return notReady("not ready after "+timeout.String(), fmt.Sprintf(": not ready after %s (GET %s%s never answered 200)", timeout, p.url, path))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-p.proc.Done(): // reported at the top of the loop
			t.Stop()
		case <-t.C:
		}
		wait = min(2*wait, readyMaxPoll)
	}
}

// stopSet tears down every process of the set: SIGTERM, then SIGKILL to the
// group after the grace period; the host verifies the group is gone.
func stopSet(ctx context.Context, es *engineSet) error {
	if es == nil {
		return nil
	}
	grace := 10 * time.Second
	if es.launch != nil && es.launch.Grace > 0 {
		grace = es.launch.Grace
	}
	// The router first (it would report the instances' deaths as errors),
	// then every instance at once: each stop is bounded by ctx's deadline,
	// so N instances take one deadline, not N.
	stop := func(p *engineProc) error {
		if err := p.proc.Stop(ctx, grace); err != nil {
			return fmt.Errorf("stop %s on %s: %w", p.name, p.hostName, err)
		}
		return nil
	}
	var errs []error
	if es.router != nil {
		errs = append(errs, stop(es.router))
	}
	ch := make(chan error, len(es.procs))
	for _, p := range es.procs {
		go func() { ch <- stop(p) }()
	}
	for range es.procs {
		errs = append(errs, <-ch)
	}
	return errors.Join(errs...)
}

func isLocal(addr string) bool { return addr == "" || addr == "local" }

// netHost is the network host of an SSH address as mbench reaches it:
// ssh_config's HostName for an alias, else the host of [user@]host[:port].
func netHost(addr string) string {
	if h, err := hosts.ResolveHostName("", addr); err == nil && h != "" {
		return h
	}
	return dialHost(addr)
}

// bindAddr is the address engines bind ({{.Bind}}): loopback when every
// remote host is reached through a tunnel or at a loopback address, else all
// interfaces, since mbench must reach a remote engine from outside.
func bindAddr(m *matrices.Matrix) string {
	for _, h := range m.Hosts {
		if isLocal(h.Address) || h.Tunnel {
			continue
		}
		nh := netHost(h.Address)
		if ip := net.ParseIP(strings.Trim(nh, "[]")); (ip != nil && ip.IsLoopback()) || nh == "localhost" {
			continue
		}
		return "0.0.0.0"
	}
	return "127.0.0.1"
}

// dialHost strips user@ and :port from an SSH address.
func dialHost(addr string) string {
	if i := strings.LastIndex(addr, "@"); i >= 0 {
		addr = addr[i+1:]
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// portInUse reports whether a socket of another process already uses port
// on the host: a stale engine there would answer /health in place of ours,
// and an outgoing connection whose local port it is makes the engine's
// listen fail. It reads the host's sockets from /proc/net/tcp and tcp6
// (locally from Go, remotely with one command; a dial through a tunnel would
// always succeed locally), and where they cannot be read it falls back to a
// dial locally and assumes free remotely. The reason names what holds it.
func (e *launcher) portInUse(ctx context.Context, hostName string, node int, h hosts.Host, baseURL string, port int) (bool, string) {
	var tables string
	if hc, ok := e.m.Hosts[hostName]; ok && (!isLocal(hc.Address) || hc.IsSlurm()) {
		out, _, err := nodeRun(ctx, h, node, "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true")
		if err != nil {
			return false, ""
		}
		tables = string(out)
	} else if tables = localTCPTables(); tables == "" {
		d := net.Dialer{Timeout: 500 * time.Millisecond}
		c, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(baseURL, "http://"))
		if err != nil {
			return false, ""
		}
		c.Close()
		return true, "something accepts connections on it"
	}
	if use := portUse(tables, port); use != "" {
		return true, use
	}
	if hc, ok := e.m.Hosts[hostName]; !ok || (isLocal(hc.Address) && !hc.IsSlurm()) {
		return bindProbe(baseURL)
	}
	return false, ""
}

// localTCPTables is this machine's /proc/net/tcp and tcp6 ("" where they
// cannot be read).
func localTCPTables() string {
	var tables string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if b, err := os.ReadFile(f); err == nil {
			tables += string(b)
		}
	}
	return tables
}

// bindProbe listens, for an instant, where a local engine will: a socket
// bound to the port but neither listening nor connected is in no
// /proc/net/tcp table (only in the kernel's bind hash), yet the engine's
// own bind would fail on it.
func bindProbe(baseURL string) (bool, string) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" {
		return false, ""
	}
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return true, "a socket bound to it (binding " + u.Host + " fails: address already in use)"
		}
		return false, ""
	}
	ln.Close()
	return false, ""
}

// tcpStates names the socket states of /proc/net/tcp (include/net/tcp_states.h).
var tcpStates = map[string]string{"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
	"05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}

// portUse reads /proc/net/tcp{,6} listings and describes the sockets that
// hold port as their local port, or returns "" when none does. Every state
// counts (a listener, an outgoing or accepted connection, a bound socket)
// except TIME_WAIT, and except orphans (inode 0: connections of a process
// that has exited, which the kernel is finishing): neither stops an engine
// that sets SO_REUSEADDR, as servers do, from listening, and an engine just
// stopped leaves such sockets behind for its successor on the same port.
func portUse(procNetTCP string, port int) string {
	seen := map[string]int{}
	var order []string
	for _, line := range strings.Split(procNetTCP, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(f[1][i+1:], 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		st, ok := tcpStates[strings.ToUpper(f[3])]
		if !ok || st == "TIME_WAIT" || (f[9] == "0" && st != "LISTEN") {
			continue
		}
		if seen[st] == 0 {
			order = append(order, st)
		}
		seen[st]++
	}
	var parts []string
	for _, st := range order {
		switch {
		case st == "LISTEN":
			parts = append(parts, "a listening socket")
		case seen[st] == 1:
			parts = append(parts, "a connection ("+st+")")
		default:
			parts = append(parts, fmt.Sprintf("%d connections (%s)", seen[st], st))
		}
	}
	return strings.Join(parts, ", ")
}

// awaitFreePort asks inUse every poll until it reports the port free, for
// at most wait of wall time from the first ask (a remote check over SSH
// can itself take long: the wait does not grow with it). It returns
// whether the port was still busy at the end, and what held it.
func awaitFreePort(ctx context.Context, wait, poll time.Duration, inUse func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(wait)
	for {
		busy, use := inUse()
		if !busy {
			return false, ""
		}
		left := time.Until(deadline)
		if left <= 0 || clock.Sleep(ctx, min(poll, left)) != nil {
			return true, use
		}
	}
}

// portFreeWait is how long a launch waits for its port to free, checking
// every portPoll, before it stops the sweep with errPortInUse.
const (
	portFreeWait = 5 * time.Second
	portPoll     = 100 * time.Millisecond
)

// errPortInUse stops a sweep: every later launch would fail the same way.
var errPortInUse = errors.New("already in use")

// runSeed derives the sim's launch seed of instance i for a run.
func runSeed(sweepSeed int64, run string, i int) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", sweepSeed, run, i)
	return int64(h.Sum64() >> 1)
}

// bootstrapQueryPath is where a Mooncake bootstrap server says which engines
// registered with it.
const bootstrapQueryPath = "/query"

// bootstrapRegistered reports whether a bootstrap server's GET /query body
// names a registered engine. vLLM 0.18.1's server answers 200 from the
// start, with {} until a worker registers (internal/conformance's
// MooncakeQueryUnregistered), then a dict keyed by DP rank whose entries
// carry an engine_id (MooncakeQueryRegistered): only the second is ready.
func bootstrapRegistered(body []byte) bool {
	var ranks map[string]struct {
		EngineID string `json:"engine_id"`
	}
	if json.Unmarshal(body, &ranks) != nil || len(ranks) == 0 {
		return false
	}
	for _, e := range ranks {
		if e.EngineID == "" {
			return false
		}
	}
	return true
}
