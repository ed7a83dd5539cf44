package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/shquote"
)

// slurmConfig is what hosts.AllocateSlurm needs for the slurm host name of
// the matrix; the allocation is recorded in the results directory, named
// after the sweep so that resume recognises it.
func slurmConfig(m *matrices.Matrix, name, dir, sweepID string) hosts.SlurmConfig {
	sl := m.Hosts[name].Slurm
	return hosts.SlurmConfig{
		SlurmRequest: sl.SlurmRequest, Steps: maxInstancesOn(m, name),
		Name: name, JobName: "mbench-" + sweepID, JobFile: filepath.Join(dir, "slurm-"+name+".json"),
	}
}

// maxInstancesOn is the most engine instances any config runs on one node
// of a host at once: the job steps its allocation must hold side by side
// there.
func maxInstancesOn(m *matrices.Matrix, name string) int {
	n := 1
	for _, c := range m.ConfigOrder {
		l, err := m.Launch(c, matrices.Runtime{})
		if err != nil {
			continue
		}
		perNode := map[int]int{}
		for _, in := range l.Instances {
			if in.Host == name {
				k := m.Hosts[name].SlurmNode(in.Index, in.GPUs)
				perNode[k]++
				n = max(n, perNode[k])
			}
		}
	}
	return n
}

// dialSlurm reuses the sweep's live allocation for a slurm host or asks
// Slurm for a new one; where mbench runs inside an allocation (a batch job:
// SLURM_JOB_ID) a slurm host without a login address uses that one, and no
// job is nested in it. sbatch, srun, squeue and scancel run on the host's
// login machine: this one, or the host's address over SSH.
func (f *fleet) dialSlurm(ctx context.Context, name string) (hosts.Host, error) {
	cfg := slurmConfig(f.m, name, f.dir, f.sweepID)
	cfg.Warn = f.warn
	if isLocal(f.m.Hosts[name].Address) && f.slurmJob != "" {
		for _, other := range f.m.HostOrder {
			if hc := f.m.Hosts[other]; other != name && hc.IsSlurm() && isLocal(hc.Address) {
				return nil, fmt.Errorf("host %s: mbench runs inside slurm job %s, which hosts %s and %s cannot both use: give one an address (its login machine) or run mbench outside the allocation", name, f.slurmJob, name, other)
			}
		}
		cfg.Inside = f.slurmJob
	}
	login, err := f.dialMachine(ctx, name)
	if err != nil {
		return nil, err
	}
	s, reused, err := hosts.AllocateSlurm(ctx, login, cfg)
	if err != nil {
		login.Close()
		return nil, err
	}
	verb := "allocated"
	if reused {
		verb = "reusing"
	}
	a := s.Allocation()
	if a.Inside {
		verb = "inside"
	}
	fmt.Fprintf(f.warn, "host %s: %s slurm job %s (%s) on %s %s\n", name, verb, a.JobID, a.JobName, plural(len(a.Nodes), "node"), strings.Join(a.Nodes, ","))
	return s, nil
}

// plural is "node" or "nodes" as n asks.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// slurmReach is the URL of port on a slurm host's node, once allocated: the
// node's address, or with tunnel: true a local port forwarded through the
// SSH connection to the login machine (nodes a cluster does not route to
// the outside are reachable from its login nodes).
func (f *fleet) slurmReach(ctx context.Context, name string, i, port int) (string, error) {
	h, err := f.host(ctx, name)
	if err != nil {
		return "", err
	}
	nh, ok := h.(hosts.NodeHost)
	if !ok {
		return "", fmt.Errorf("host %s: not an allocation's host", name)
	}
	a := nh.Allocation()
	if i < 0 || i >= len(a.Nodes) {
		return "", fmt.Errorf("host %s: node %d of a %d-node allocation", name, i, len(a.Nodes))
	}
	node := net.JoinHostPort(a.NodeAddr(i), strconv.Itoa(port))
	if !f.m.Hosts[name].Tunnel {
		return "http://" + node, nil
	}
	key := name + ":" + strconv.Itoa(i) + ":" + strconv.Itoa(port)
	if a, ok := f.tunnels[key]; ok {
		return "http://" + a, nil
	}
	fwd, err := nh.Forward(ctx, node)
	if err != nil {
		return "", fmt.Errorf("host %s: tunnel to %s through the login machine: %w", name, node, err)
	}
	f.tunnels[key] = fwd
	return "http://" + fwd, nil
}

// bind is the address engines bind: bindAddr's answer, except that a slurm
// host's engines bind all interfaces unless its node is reached at a
// loopback address (a one-machine cluster).
func (f *fleet) bind() string {
	b := bindAddr(f.m)
	for _, name := range f.m.HostOrder {
		if !f.m.Hosts[name].IsSlurm() {
			continue
		}
		h, ok := f.connected(name)
		if nh, isNode := h.(hosts.NodeHost); ok && isNode && allLoopback(nh.Allocation()) {
			continue
		}
		return "0.0.0.0"
	}
	return b
}

// dryRunBind is the bind address a dry run shows: a slurm host's node is
// not known before salloc, so with one its engines are shown binding all
// interfaces, as they do unless the node's address is loopback.
func dryRunBind(m *matrices.Matrix) string {
	if slices.ContainsFunc(m.HostOrder, func(name string) bool { return m.Hosts[name].IsSlurm() }) {
		return "0.0.0.0"
	}
	return bindAddr(m)
}

// allLoopback reports whether every node of the allocation is reached at a
// loopback address (a one-machine cluster).
func allLoopback(a hosts.Allocation) bool {
	for i := range a.Nodes {
		if ip := net.ParseIP(a.NodeAddr(i)); ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// nodeRun runs cmd where h's engines run: on node i of a slurm host's
// allocation as a step, else on the host.
func nodeRun(ctx context.Context, h hosts.Host, i int, cmd string) ([]byte, []byte, error) {
	if nh, ok := h.(hosts.NodeHost); ok {
		return nh.RunOnNode(ctx, i, cmd)
	}
	return h.Run(ctx, cmd)
}

// slurmNodes says where the slurm hosts of the sweep run, for the journal:
// "host: slurm job J node N (cluster C)" (nodes N1,N2 for several) for each
// connected slurm host.
func (f *fleet) slurmNodes() []string {
	var out []string
	for _, nh := range f.nodeHosts() {
		a := nh.Allocation()
		line := fmt.Sprintf("%s: slurm job %s %s %s", nh.Name(), a.JobID, plural(len(a.Nodes), "node"), strings.Join(a.Nodes, ","))
		if a.Cluster != "" {
			line += " (cluster " + a.Cluster + ")"
		}
		out = append(out, line)
	}
	return out
}

// nodeHosts are the connected slurm hosts, in the matrix's order.
func (f *fleet) nodeHosts() []hosts.NodeHost {
	var out []hosts.NodeHost
	for _, name := range f.m.HostOrder {
		if h, ok := f.connected(name); ok {
			if nh, ok := h.(hosts.NodeHost); ok {
				out = append(out, nh)
			}
		}
	}
	return out
}

// lostAllocation returns runErr, wrapping hosts.ErrAllocationEnded, when
// the run failed because a slurm host's allocation ended, else nil.
func (f *fleet) lostAllocation(ctx context.Context, runErr error) error {
	if errors.Is(runErr, hosts.ErrAllocationEnded) {
		return runErr
	}
	if err := f.slurmEnded(ctx); err != nil {
		return allocationEnded(err, runErr)
	}
	return nil
}

// allocationEnded is the error of a run that failed because its allocation
// ended: the cause (ended, wrapping hosts.ErrAllocationEnded) on the first
// line, then the run's own error, which may quote a log's last lines.
func allocationEnded(ended, runErr error) error {
	return fmt.Errorf("%w\nthe run failed with it: %s", ended, strings.ReplaceAll(strings.TrimSpace(runErr.Error()), "\n", "\n  "))
}

// slurmEnded returns an error wrapping hosts.ErrAllocationEnded when the
// allocation of a connected slurm host has ended.
func (f *fleet) slurmEnded(ctx context.Context) error {
	for _, nh := range f.nodeHosts() {
		if err := nh.Alive(context.WithoutCancel(ctx)); err != nil {
			return err
		}
	}
	return nil
}

// dryRunSlurm prints the sbatch line of each slurm host of the matrix.
func dryRunSlurm(w io.Writer, m *matrices.Matrix, dir, sweepID string) {
	for _, name := range m.HostOrder {
		if m.Hosts[name].IsSlurm() {
			cfg := slurmConfig(m, name, dir, sweepID)
			via := slurmVia(m.Hosts[name])
			scope := "one allocation for the sweep, recorded in %s, completed when the sweep is, cancelled if mbench stops first"
			if m.Hosts[name].Slurm.Allocation == matrices.AllocationBlock {
				scope = "a new allocation for every block (allocation: block), recorded in %s, completed when the block ends"
			}
			fmt.Fprintf(w, "# [%s %s] "+scope+" (inside an allocation, SLURM_JOB_ID, that one instead):\n#   $ %s\n", name, via, cfg.JobFile, cfg.SbatchCommand())
			fmt.Fprintf(w, "# [%s %s] engines are job steps; they bind 0.0.0.0 unless the node's address is loopback; a stop is scancel --signal=TERM, engine.grace, scancel\n", name, via)
			fmt.Fprintf(w, "# [%s %s] each run's probe is a step seeing every GPU of the allocation on a node, one per node the run uses:\n", name, via)
			for i := range max(cfg.Nodes, 1) {
				pname := "probe-" + name
				if cfg.Nodes > 1 {
					pname = fmt.Sprintf("probe-%s-%d", name, i)
				}
				fmt.Fprintf(w, "#   $ %s sh -c '<mbench probe …>'\n", shquote.Join(cfg.OverlapArgs("<job id>", dryRunNode(m, name, i), pname)))
			}
		}
	}
}

// slurmVia names how mbench reaches a slurm host's cluster: "slurm" where
// mbench runs on the login machine, "slurm via <address>" over SSH.
func slurmVia(hc matrices.Host) string {
	if isLocal(hc.Address) {
		return "slurm"
	}
	return "slurm via " + hc.Address
}

// slurmStep is command as a slurm host runs it, a job step of the
// allocation (<job id> and <node> stand for what Slurm grants); other
// hosts' commands are returned unchanged.
func slurmStep(m *matrices.Matrix, host, state string, node int, name string, gpus int, command string) string {
	if !m.Hosts[host].IsSlurm() {
		return command
	}
	return slurmConfig(m, host, "", "").EngineStepCommand("<job id>", dryRunNode(m, host, node), name, gpus, command, path.Join(state, "pids", name+".nodepid"))
}

// dryRunNode stands for node i of a slurm host's allocation in a dry run:
// <node>, or <node i> (of 0..nodes-1, in Slurm's order) for several.
func dryRunNode(m *matrices.Matrix, host string, i int) string {
	if m.Hosts[host].Slurm.Nodes > 1 {
		return fmt.Sprintf("<node %d>", i)
	}
	return "<node>"
}

// nodeOf is matrices.Runtime.Node: the name and address of node i of a
// connected slurm host's allocation.
func (f *fleet) nodeOf(host string, i int) (name, addr string, ok bool) {
	h, connected := f.connected(host)
	nh, isNode := h.(hosts.NodeHost)
	if !connected || !isNode {
		return "", "", false
	}
	a := nh.Allocation()
	if i < 0 || i >= len(a.Nodes) {
		return "", "", false
	}
	return a.Nodes[i], a.NodeAddr(i), true
}

// completeAllocations, once a sweep has finished, stops its engines and
// ends the allocation of every connected slurm host as a success, so that
// Slurm records the job COMPLETED (closing the hosts without it cancels
// them). A failure to complete is said, not fatal: the allocation is then
// cancelled when the hosts close.
func (s *sweep) completeAllocations(ctx context.Context) {
	done := s.fleet.nodeHosts()
	if len(done) == 0 {
		return
	}
	if err := s.engines.stop(ctx); err != nil {
		s.logf("warning: stop the engines before completing the slurm allocation: %v", err)
	}
	for _, nh := range done {
		if err := nh.Complete(ctx); err != nil {
			s.logf("warning: host %s: complete slurm job %s: %v (it is cancelled instead)", nh.Name(), nh.Allocation().JobID, err)
		}
	}
}

// journalNodeRE parses a journal line's slurm placement (slurmNodes).
var journalNodeRE = regexp.MustCompile(`^(\S+): slurm job (\S+) nodes? (\S+)(?: \(cluster (\S+)\))?$`)

// slurmEnv is env (the sweep's fingerprint) with, for the report's
// environment section, one row per slurm allocation the runs used: its
// cluster, job and nodes, and the runs (cell/block) it held.
func slurmEnv(env map[string]string, entries []JournalEntry) map[string]string {
	type alloc struct{ host, job, nodes, cluster string }
	runs := map[alloc][]string{}
	var order []alloc
	for _, e := range entries {
		for _, n := range e.Nodes {
			m := journalNodeRE.FindStringSubmatch(n)
			if m == nil {
				continue
			}
			a := alloc{m[1], m[2], m[3], m[4]}
			if _, ok := runs[a]; !ok {
				order = append(order, a)
			}
			runs[a] = append(runs[a], fmt.Sprintf("%s/b%d", e.Cell, e.Block))
		}
	}
	if len(order) == 0 {
		return env
	}
	out := maps.Collect(maps.All(env)) // a copy, never nil
	for _, a := range order {
		cluster := cmp.Or(a.cluster, "unnamed")
		out["slurm "+a.host+" job "+a.job] = fmt.Sprintf("cluster %s, %s %s, %d run(s): %s",
			cluster, plural(strings.Count(a.nodes, ",")+1, "node"), a.nodes, len(runs[a]), strings.Join(runs[a], " "))
	}
	return out
}
