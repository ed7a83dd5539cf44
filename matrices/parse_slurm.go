package matrices

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Slurm is a host that mbench obtains from a Slurm cluster: one allocation
// per sweep (salloc --no-shell), engine instances started in it as job
// steps with their GPUs bound by Slurm. mbench runs where salloc and srun
// work (a login node) and the results directory must be on a filesystem the
// compute node shares.
type Slurm struct {
	Partition  string        // -p ("" = the cluster's default)
	Account    string        // -A ("" = the user's default)
	Constraint string        // -C ("" = none)
	TimeLimit  time.Duration // -t, required: the allocation ends by itself at the latest then
	// Nodes is -N: the instances of the host are spread over them by
	// their GPUs (see Host.SlurmNode).
	Nodes int
	// GPUsPerNode is the GPUs asked per node (--gres=gpu:N); 0 asks none.
	GPUsPerNode int
	// CPUsPerInstance is each engine step's CPUs (-c; default 1).
	CPUsPerInstance int
	Options         []string // extra salloc options, passed as written
	StepOptions     []string // extra srun options for engine steps
	// Allocation is how long one allocation lasts: the sweep (default) or
	// a block.
	Allocation SlurmAllocation
}

// SlurmAllocation is the lifetime of a slurm host's allocation.
type SlurmAllocation string

const (
	// AllocationSweep: one allocation for the whole sweep (resume reuses it
	// while Slurm still runs it).
	AllocationSweep SlurmAllocation = "sweep"
	// AllocationBlock: a new allocation for every block of a fixed-rate
	// sweep, cancelled when the block ends (a capacity search keeps one).
	AllocationBlock SlurmAllocation = "block"
)

// slurm decodes hosts.<name>.slurm.
func (d *decoder) slurm(v *yaml.Node, path string) *Slurm {
	s := &Slurm{Nodes: 1, CPUsPerInstance: 1, Allocation: AllocationSweep}
	line := v.Line
	d.object(v, path, line, []field{
		{"partition", false, func(v *yaml.Node, fp string) { s.Partition = d.slurmWord(v, fp) }},
		{"account", false, func(v *yaml.Node, fp string) { s.Account = d.slurmWord(v, fp) }},
		{"constraint", false, func(v *yaml.Node, fp string) { s.Constraint = d.nonEmpty(v, fp) }},
		{"time_limit", true, func(v *yaml.Node, fp string) {
			s.TimeLimit = d.positiveDuration(v, fp)
			if s.TimeLimit > 0 && s.TimeLimit < time.Minute {
				d.add(v.Line, fp, "a duration of at least 1m (Slurm counts whole minutes)", "time limit %s is under a minute", s.TimeLimit)
			}
		}},
		{"nodes", false, func(v *yaml.Node, fp string) { s.Nodes = d.intField(v, fp, 1, 1024) }},
		{"gpus_per_node", false, func(v *yaml.Node, fp string) { s.GPUsPerNode = d.intField(v, fp, 0, 1024) }},
		{"cpus_per_instance", false, func(v *yaml.Node, fp string) { s.CPUsPerInstance = d.intField(v, fp, 1, 1<<16) }},
		{"options", false, func(v *yaml.Node, fp string) { s.Options = d.slurmOptions(v, fp) }},
		{"step_options", false, func(v *yaml.Node, fp string) { s.StepOptions = d.slurmOptions(v, fp) }},
		{"allocation", false, func(v *yaml.Node, fp string) {
			if a, ok := d.enum(v, fp, string(AllocationSweep), string(AllocationBlock)); ok {
				s.Allocation = SlurmAllocation(a)
			}
		}},
	})
	return s
}

// slurmWord decodes a partition or account name: one word, no spaces.
func (d *decoder) slurmWord(v *yaml.Node, path string) string {
	s, ok := d.str(v, path)
	if ok && (s == "" || strings.HasPrefix(s, "-") || strings.ContainsAny(s, " \t\n\r\x00")) {
		d.add(v.Line, path, "a Slurm name without spaces", "invalid value %q", s)
	}
	return s
}

// slurmOptions decodes extra command-line options: each entry one option
// such as --qos=high, passed to Slurm as one argument.
func (d *decoder) slurmOptions(v *yaml.Node, path string) []string {
	es, ps, ok := d.list(v, path)
	if !ok {
		return nil
	}
	var out []string
	for i, e := range es {
		s, ok := d.str(e, ps[i])
		if !ok {
			continue
		}
		if !strings.HasPrefix(s, "-") || strings.ContainsAny(s, "\n\r\x00") {
			d.add(e.Line, ps[i], "one option such as --qos=high", "invalid option %q", s)
			continue
		}
		if k, _, _ := strings.Cut(s, "="); slurmOwned[k] {
			d.add(e.Line, ps[i], "an option mbench does not set itself", "%s is set by mbench (%s)", k, slurmOwnedWhy)
			continue
		}
		out = append(out, s)
	}
	return out
}

// slurmOwned are the options mbench sets on salloc and srun itself.
var slurmOwned = map[string]bool{"--jobid": true, "-J": true, "--job-name": true, "--no-shell": true,
	"-w": true, "--nodelist": true, "--overlap": true, "--gres": true, "--gpus": true, "-G": true}

const slurmOwnedWhy = "the job name, node, GPUs and step sharing come from the matrix"

// checkHostKind checks that a host has an address or a slurm section, and
// gives a slurm host its GPU indices 0..gpus_per_node-1, which the topology
// checks and {{.GPUs}} use (Slurm picks the real devices). A slurm host's
// address, if any, is its login machine, reached over SSH; the SSH settings
// (host_key_policy, tunnel, workdir, mbench_path) apply only then.
func (d *decoder) checkHostKind(h *Host, path string, line int) {
	switch {
	case h.Slurm == nil && h.Address == "":
		d.add(line, join(path, "address"), "", "missing required key (or a slurm section)")
	case h.Slurm != nil:
		keys := []string{"gpus"}
		if h.Address == "" || h.Address == "local" {
			keys = append(keys, "host_key_policy", "tunnel", "workdir", "mbench_path")
		}
		for _, k := range keys {
			if l := d.lines[join(path, k)]; l > 0 && k == "gpus" {
				d.add(l, join(path, k), "slurm settings only", "gpus does not apply to a slurm host (the GPUs are hosts.%s.slurm.gpus_per_node)", h.Name)
			} else if l > 0 {
				d.add(l, join(path, k), "an address (the login machine, over SSH)", "%s applies to a slurm host only when mbench reaches its login machine over SSH (address)", k)
			}
		}
		h.GPUs = make([]int, h.Slurm.GPUsPerNode*max(h.Slurm.Nodes, 1))
		for i := range h.GPUs {
			h.GPUs[i] = i
		}
	}
}

// SlurmNode is the node, an index into the allocation's nodes, on which
// instance index of a slurm host runs, given its GPUs: a slurm host's GPUs
// are numbered across its nodes (node k holds k×gpus_per_node on), and an
// instance runs on the node of its first GPU; instances without GPUs go
// round the nodes. 0 for any other host.
func (h Host) SlurmNode(index int, gpus []int) int {
	if h.Slurm == nil || h.Slurm.Nodes <= 1 {
		return 0
	}
	if len(gpus) > 0 && h.Slurm.GPUsPerNode > 0 {
		return gpus[0] / h.Slurm.GPUsPerNode
	}
	return index % h.Slurm.Nodes
}

// nodeGPUs is how {{.GPUs}} shows an instance's GPUs: on a slurm host,
// numbered within their node, as the node numbers them.
func (h Host) nodeGPUs(gpus []int) []int {
	if h.Slurm == nil || h.Slurm.GPUsPerNode == 0 {
		return gpus
	}
	out := make([]int, len(gpus))
	for i, g := range gpus {
		out[i] = g % h.Slurm.GPUsPerNode
	}
	return out
}

// checkSlurmSpan reports an instance of a multi-node slurm host whose GPUs
// would span two nodes (a job step of one task runs on one node).
func (d *decoder) checkSlurmSpan(h Host, hn, path string, instances, gpusPerInstance int) {
	if h.Slurm == nil || h.Slurm.Nodes <= 1 || gpusPerInstance == 0 || h.Slurm.GPUsPerNode == 0 {
		return
	}
	gpn := h.Slurm.GPUsPerNode
	for i := range instances {
		first, last := i*gpusPerInstance, (i+1)*gpusPerInstance-1
		if last < len(h.GPUs) && first/gpn != last/gpn {
			d.add(d.lineOf(path+".topology", path), path+".topology",
				fmt.Sprintf("gpus_per_instance that divides hosts.%s.slurm.gpus_per_node (%d)", hn, gpn),
				"instance %d on slurm host %s would span nodes %d and %d (GPUs %d-%d, %d per node): a step runs on one node",
				i, hn, first/gpn, last/gpn, first, last, gpn)
			return
		}
	}
}

// IsSlurm reports whether the host is allocated by Slurm.
func (h Host) IsSlurm() bool { return h.Slurm != nil }

// SlurmTime renders a duration as Slurm's -t takes it, [days-]hours:minutes:seconds
// rounded up to whole minutes.
func SlurmTime(d time.Duration) string {
	m := int64((d + time.Minute - 1) / time.Minute)
	days, h, mm := m/(24*60), (m/60)%24, m%60
	if days > 0 {
		return fmt.Sprintf("%d-%02d:%02d:00", days, h, mm)
	}
	return fmt.Sprintf("%d:%02d:00", h, mm)
}
