package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"path/filepath"
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
		Name: name, JobName: "mbench-" + sweepID, JobFile: filepath.Join(dir, "slurm-"+name+".json"),
		Partition: sl.Partition, Account: sl.Account, Constraint: sl.Constraint, TimeLimit: matrices.SlurmTime(sl.TimeLimit),
		GPUsPerNode: sl.GPUsPerNode, CPUsPerStep: sl.CPUsPerInstance, Options: sl.Options, StepOptions: sl.StepOptions,
		Steps: maxInstancesOn(m, name), Nodes: sl.Nodes,
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
// Slurm for a new one. salloc, srun, squeue and scancel run on the host's
// login machine: this one, or the host's address over SSH.
func (f *fleet) dialSlurm(ctx context.Context, name string) (hosts.Host, error) {
	cfg := slurmConfig(f.m, name, f.dir, f.sweepID)
	cfg.Warn = f.warn
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
	fmt.Fprintf(f.warn, "host %s: %s slurm job %s (%s) on node %s\n", name, verb, s.JobID(), cfg.JobName, s.Node())
	return s, nil
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
	s := h.(*hosts.Slurm)
	if i < 0 || i >= len(s.Nodes()) {
		return "", fmt.Errorf("host %s: node %d of a %d-node allocation", name, i, len(s.Nodes()))
	}
	node := net.JoinHostPort(s.NodeAddrOf(i), strconv.Itoa(port))
	if !f.m.Hosts[name].Tunnel {
		return "http://" + node, nil
	}
	key := name + ":" + strconv.Itoa(i) + ":" + strconv.Itoa(port)
	if a, ok := f.tunnels[key]; ok {
		return "http://" + a, nil
	}
	a, err := s.Forward(ctx, node)
	if err != nil {
		return "", fmt.Errorf("host %s: tunnel to %s through the login machine: %w", name, node, err)
	}
	f.tunnels[key] = a
	return "http://" + a, nil
}

// bind is the address engines bind: bindAddr's answer, except that a slurm
// host's engines bind all interfaces unless its node is reached at a
// loopback address (a one-machine cluster).
func (s *Sweep) bind() string {
	b := bindAddr(s.m)
	for _, name := range s.m.HostOrder {
		if !s.m.Hosts[name].IsSlurm() {
			continue
		}
		h, ok := s.fleet.connected(name)
		if sl, isSlurm := h.(*hosts.Slurm); ok && isSlurm && allLoopback(sl) {
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
	for _, name := range m.HostOrder {
		if m.Hosts[name].IsSlurm() {
			return "0.0.0.0"
		}
	}
	return bindAddr(m)
}

// allLoopback reports whether every node of the allocation is reached at a
// loopback address (a one-machine cluster).
func allLoopback(sl *hosts.Slurm) bool {
	for i := range sl.Nodes() {
		if ip := net.ParseIP(sl.NodeAddrOf(i)); ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// nodeRun runs cmd where h's engines run: on node i of a slurm host's
// allocation as a step, else on the host.
func nodeRun(ctx context.Context, h hosts.Host, i int, cmd string) ([]byte, []byte, error) {
	if s, ok := h.(*hosts.Slurm); ok {
		return s.RunOnNode(ctx, i, cmd)
	}
	return h.Run(ctx, cmd)
}

// slurmNodes says where the slurm hosts of the sweep run, for the journal:
// "host: slurm job J node N" for each connected slurm host.
func (s *Sweep) slurmNodes() []string {
	var out []string
	for _, name := range s.m.HostOrder {
		if h, ok := s.fleet.connected(name); ok {
			if sl, ok := h.(*hosts.Slurm); ok {
				if n := sl.Nodes(); len(n) > 1 {
					out = append(out, fmt.Sprintf("%s: slurm job %s nodes %s", name, sl.JobID(), strings.Join(n, ",")))
				} else {
					out = append(out, fmt.Sprintf("%s: slurm job %s node %s", name, sl.JobID(), sl.Node()))
				}
			}
		}
	}
	return out
}

// lostAllocation returns runErr, wrapping hosts.ErrAllocationEnded, when
// the run failed because a slurm host's allocation ended, else nil.
func (s *Sweep) lostAllocation(ctx context.Context, runErr error) error {
	if errors.Is(runErr, hosts.ErrAllocationEnded) {
		return runErr
	}
	if err := s.slurmEnded(ctx); err != nil {
		return fmt.Errorf("%v: %w", runErr, err)
	}
	return nil
}

// slurmEnded returns an error wrapping hosts.ErrAllocationEnded when the
// allocation of a connected slurm host has ended.
func (s *Sweep) slurmEnded(ctx context.Context) error {
	for _, name := range s.m.HostOrder {
		if h, ok := s.fleet.connected(name); ok {
			if sl, ok := h.(*hosts.Slurm); ok {
				if err := sl.Alive(context.WithoutCancel(ctx)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// dryRunSlurm prints the salloc line of each slurm host of the matrix.
func dryRunSlurm(w io.Writer, m *matrices.Matrix, dir, sweepID string) {
	for _, name := range m.HostOrder {
		if m.Hosts[name].IsSlurm() {
			cfg := slurmConfig(m, name, dir, sweepID)
			via := slurmVia(m.Hosts[name])
			scope := "one allocation for the sweep, recorded in %s, cancelled when mbench exits"
			if m.Hosts[name].Slurm.Allocation == matrices.AllocationBlock {
				scope = "a new allocation for every block (allocation: block), recorded in %s, cancelled when the block ends"
			}
			fmt.Fprintf(w, "# [%s %s] "+scope+":\n#   $ %s\n", name, via, cfg.JobFile, cfg.SallocCommand())
			fmt.Fprintf(w, "# [%s %s] engines are job steps; they bind 0.0.0.0 unless the node's address is loopback\n", name, via)
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
// allocation (<job id> and <node> stand for what salloc grants); other
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
