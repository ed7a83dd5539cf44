package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mbench/mbench/orchestrator/hosts"
	"github.com/mbench/mbench/probes"
	"github.com/mbench/mbench/shquote"
)

// onThisMachine reports whether a host's engines run on the machine mbench
// runs on: a local host. A slurm host's engines run on its allocated node,
// even where mbench runs on a login node that shares its filesystem.
func (f *fleet) onThisMachine(name string) bool {
	hc := f.m.Hosts[name]
	return isLocal(hc.Address) && !hc.IsSlurm()
}

// selfOn is the mbench binary a host runs probes and {{.Self}} with: the
// uploaded copy or hosts.X.mbench_path; for a slurm host whose login
// machine is this one, its mbench_path (the nodes' copy) or this binary
// (the nodes share its filesystem).
func (f *fleet) selfOn(name string) (string, bool) {
	if p, ok := f.selfPath[name]; ok {
		return p, true
	}
	hc := f.m.Hosts[name]
	switch {
	case hc.IsSlurm() && hc.MbenchPath != "":
		return hc.MbenchPath, true
	case hc.IsSlurm() && isLocal(hc.Address) && f.self != "":
		return f.self, true
	}
	return "", false
}

// startProbeOn starts the `mbench probe` command on a host: as an --overlap
// step bound to every GPU of the allocation on a slurm host's node, else as
// a process of the host.
func startProbeOn(ctx context.Context, h hosts.Host, spec hosts.ProcSpec) (hosts.Process, error) {
	if nh, ok := h.(hosts.NodeHost); ok {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return nh.StartOnNode(ctx, spec)
	}
	return h.Start(ctx, spec)
}

// nodePid is the pid by which a process is known where it runs: a Slurm
// step's task on its node, else the process's own pid. 0 when a step's pid
// cannot be read yet.
func nodePid(p hosts.Process) int {
	np, ok := p.(hosts.NodeProcess)
	if !ok {
		return p.Pid()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pid, err := np.NodePid(ctx)
	if err != nil {
		return 0
	}
	return pid
}

// slurmGPUReads returns, for each slurm host the sweep uses, a reader of
// its node's GPUs for the gate: each read is a `mbench probe --once` step
// that sees every GPU of the allocation. A node without NVML is said once
// and left out (the gate cannot cover it); gated names the hosts read.
func (f *fleet) slurmGPUReads(ctx context.Context) (reads []func(context.Context) ([]probes.GPUSample, error), gated map[string]bool) {
	gated = map[string]bool{}
	for _, nh := range f.nodeHosts() {
		name := nh.Name()
		self, ok := f.selfOn(name)
		if !ok {
			f.logf("host %s: no mbench binary there (set hosts.%s.mbench_path): the GPU gate does not cover its node", name, name)
			continue
		}
		covered := true
		for i := range nh.Allocation().Nodes {
			read, err := f.slurmGPURead(ctx, name, nh, i, self)
			if err != nil {
				f.logf("%v: the GPU gate does not cover this node", err)
				covered = false
				continue
			}
			reads = append(reads, read)
		}
		gated[name] = covered
	}
	return reads, gated
}

// slurmGPURead returns a reader of the GPUs of node i of a slurm host's
// allocation, after a first read that shows it works.
func (f *fleet) slurmGPURead(ctx context.Context, name string, nh hosts.NodeHost, i int, self string) (func(context.Context) ([]probes.GPUSample, error), error) {
	node := nh.Allocation().Nodes[i]
	{
		// SelfEnv (what makes a re-executed test binary act as mbench) is
		// not secret, so it may go on the command line of a Run.
		env := ""
		for _, kv := range f.selfEnv {
			env += shquote.Quote(kv) + " "
		}
		if env != "" {
			env = "env " + env
		}
		cmd := fmt.Sprintf("%s%s probe --once --host %s --host-out none", env, shquote.Path(self), shquote.Quote(probeLabel(name, nh, i)))
		read := func(ctx context.Context) ([]probes.GPUSample, error) {
			out, stderr, err := nh.RunOnNodeGPUs(ctx, i, "gate-"+name, cmd)
			if err != nil {
				return nil, fmt.Errorf("host %s: read the GPUs of node %s: %w", name, node, err)
			}
			samples, err := probes.ReadGPUSamples(bytes.NewReader(out))
			if err == nil && len(samples) == 0 {
				err = fmt.Errorf("no GPU samples: %s", firstLine(strings.TrimSpace(string(stderr))))
			}
			if err != nil {
				return nil, fmt.Errorf("host %s: read the GPUs of node %s: %w", name, node, err)
			}
			return samples, nil
		}
		if _, err := read(ctx); err != nil {
			return nil, err
		}
		return read, nil
	}
}

// probeLabel is the host name GPU and host samples of node i of a slurm
// host carry: the host's name, or <host>/<node> for a multi-node one.
func probeLabel(name string, nh hosts.NodeHost, i int) string {
	if n := nh.Allocation().Nodes; len(n) > 1 {
		return name + "/" + n[i]
	}
	return name
}

// sampleHost is the host name a process's GPU samples carry: "local" for
// this machine, probeLabel for a slurm step, else the host's name.
func (f *fleet) sampleHost(p *engineProc) string {
	if f.onThisMachine(p.hostName) {
		return "local"
	}
	if nh, ok := p.host.(hosts.NodeHost); ok {
		return probeLabel(p.hostName, nh, p.node)
	}
	return p.hostName
}
