package matrices

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/mbench/mbench/orchestrator/hosts"
	"go.yaml.in/yaml/v3"
)

// Slurm is a host that mbench obtains from a Slurm cluster: one allocation
// per sweep (a job whose batch script only holds it), engine instances
// started in it as job steps with their GPUs bound by Slurm. mbench runs
// where sbatch and srun work (a login node, or inside an allocation: a
// batch job) and the results directory must be on a filesystem the compute
// nodes share.
type Slurm struct {
	hosts.SlurmRequest
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

// slurm decodes hosts.<name>.slurm. Defaults that depend on the engine
// (cpus_per_instance, mem, exclusive) are filled in by slurmDefaults once
// the engine and configs are known.
func (d *decoder) slurm(v *yaml.Node, path string) *Slurm {
	s := &Slurm{SlurmRequest: hosts.SlurmRequest{Nodes: 1}, Allocation: AllocationSweep}
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
		{"mem", false, func(v *yaml.Node, fp string) { s.Mem = d.slurmMem(v, fp) }},
		{"exclusive", false, func(v *yaml.Node, fp string) { s.Exclusive = d.boolean(v, fp) }},
		{"max_wait", false, func(v *yaml.Node, fp string) { s.MaxWait = d.positiveDuration(v, fp) }},
		{"options", false, func(v *yaml.Node, fp string) { s.Options = d.slurmOptions(v, fp, path, false) }},
		{"step_options", false, func(v *yaml.Node, fp string) { s.StepOptions = d.slurmOptions(v, fp, path, true) }},
		{"allocation", false, func(v *yaml.Node, fp string) {
			if a, ok := d.enum(v, fp, string(AllocationSweep), string(AllocationBlock)); ok {
				s.Allocation = SlurmAllocation(a)
			}
		}},
	})
	return s
}

// slurmMemRe is Slurm's --mem: a size with an optional unit.
var slurmMemRe = regexp.MustCompile(`^[0-9]+[KMGT]?$`)

// slurmMem decodes mem: "0" or a size such as 64G, as --mem takes it.
func (d *decoder) slurmMem(v *yaml.Node, path string) string {
	s, ok := d.str(v, path)
	if ok && !slurmMemRe.MatchString(s) {
		d.add(v.Line, path, "a size as --mem takes it (64G, 512000M), or 0 for all of each node's memory", "invalid value %q", s)
	}
	return s
}

// slurmDefaults fills in, after the engine and configs are parsed, the
// slurm settings whose defaults depend on them (see Slurm), where the
// matrix does not set them.
func (d *decoder) slurmDefaults(m *Matrix) {
	for _, hn := range m.HostOrder {
		h := m.Hosts[hn]
		if h.Slurm == nil {
			continue
		}
		path := "hosts." + hn + ".slurm"
		vllm := m.Engine.Kind == EngineVLLM
		if d.lines[path+".cpus_per_instance"] == 0 {
			h.Slurm.CPUsPerInstance = 1
			if vllm {
				h.Slurm.CPUsPerInstance = 2 + 2*m.maxGPUsPerInstance(hn)
			}
		}
		if d.lines[path+".mem"] == 0 && vllm {
			h.Slurm.Mem = "0"
		}
		if d.lines[path+".exclusive"] == 0 && vllm {
			h.Slurm.Exclusive = true
		}
	}
}

// maxGPUsPerInstance is the most GPUs an instance of any config has on host.
func (m *Matrix) maxGPUsPerInstance(host string) int {
	n := 0
	for _, c := range m.Configs {
		if slices.Contains(m.topologyHosts(c), host) {
			n = max(n, c.Topology.GPUsPerInstance)
		}
	}
	return n
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
// such as --qos=high, passed to Slurm as one argument. Options that a key
// of the slurm section, or mbench itself, sets are refused with a pointer
// to that key (step is true for step_options, which may set a step's
// memory).
func (d *decoder) slurmOptions(v *yaml.Node, path, slurmPath string, step bool) []string {
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
		if !strings.HasPrefix(s, "-") || s == "-" || s == "--" || strings.ContainsAny(s, "\n\r\x00") {
			d.add(e.Line, ps[i], "one option such as --qos=high", "invalid option %q", s)
			continue
		}
		name := optionName(s)
		if key, owned := slurmOwned[name]; owned && !(step && key == "mem") {
			if key == "" {
				d.add(e.Line, ps[i], "an option mbench does not set itself", "%s is set by mbench (%s)", name, slurmOwnedWhy)
			} else {
				d.add(e.Line, ps[i], "the key "+slurmPath+"."+key, "%s is set from %s.%s: use that key", name, slurmPath, key)
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// optionName is the option an argument sets: "--gpus-per-node" of
// "--gpus-per-node=8", "-G" of "-G8".
func optionName(arg string) string {
	if strings.HasPrefix(arg, "--") {
		name, _, _ := strings.Cut(arg, "=")
		return name
	}
	return arg[:2]
}

// slurmOwned maps the options that mbench sets on sbatch and srun to the
// key of the slurm section that sets them ("" for those mbench sets from
// the matrix as a whole: the job's name, its nodes, the steps).
var slurmOwned = map[string]string{
	"--jobid": "", "-J": "", "--job-name": "", "--no-shell": "", "-w": "", "--nodelist": "", "--overlap": "",
	"--wrap": "", "--parsable": "", "-o": "", "--output": "", "-n": "", "--ntasks": "", "--ntasks-per-node": "",
	"-N": "nodes", "--nodes": "nodes",
	"--gres": "gpus_per_node", "--gpus": "gpus_per_node", "-G": "gpus_per_node", "--gpus-per-node": "gpus_per_node",
	"--gpus-per-task": "gpus_per_node", "--gpus-per-socket": "gpus_per_node",
	"-c": "cpus_per_instance", "--cpus-per-task": "cpus_per_instance", "--cpus-per-gpu": "cpus_per_instance",
	"--mem": "mem", "--mem-per-cpu": "mem", "--mem-per-gpu": "mem",
	"--exclusive": "exclusive", "-t": "time_limit", "--time": "time_limit",
	"-p": "partition", "--partition": "partition", "-A": "account", "--account": "account",
	"-C": "constraint", "--constraint": "constraint",
}

const slurmOwnedWhy = "the job name, node, tasks and step sharing come from the matrix"

// checkHostKind checks that a host has an address or a slurm section, and
// gives a slurm host its GPU indices 0..gpus_per_node-1, which the topology
// checks and {{.GPUs}} use (Slurm picks the real devices). A slurm host's
// address, if any, is its login machine, reached over SSH; the SSH settings
// (host_key_policy, tunnel, workdir) apply only then. mbench_path, the
// mbench binary the nodes run, applies to either.
func (d *decoder) checkHostKind(h *Host, path string, line int) {
	switch {
	case h.Slurm == nil && h.Address == "":
		d.add(line, join(path, "address"), "", "missing required key (or a slurm section)")
	case h.Slurm != nil:
		keys := []string{"gpus"}
		if h.Address == "" || h.Address == "local" {
			keys = append(keys, "host_key_policy", "tunnel", "workdir")
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

// slurmWarnings warns of a slurm host whose time limit is shorter than
// validate's estimate of what one allocation must last: the sweep's
// repeat.min blocks, or one block with allocation: block (a capacity search
// keeps one allocation; its estimate is not made here).
func (m *Matrix) slurmWarnings() []Warning {
	if m.Capacity != nil {
		return nil
	}
	var ws []Warning
	for _, hn := range m.HostOrder {
		h := m.Hosts[hn]
		if h.Slurm == nil || h.Slurm.TimeLimit <= 0 {
			continue
		}
		est, what := m.EstimateDuration(), fmt.Sprintf("the sweep's %d block(s)", m.Repeat.Min)
		if h.Slurm.Allocation == AllocationBlock {
			est, what = secondsDuration(m.passSeconds(m.Cells())), "one block"
		}
		if h.Slurm.TimeLimit < est {
			f := "hosts." + hn + ".slurm.time_limit"
			ws = append(ws, Warning{Line: m.lines[f], Field: f,
				Msg: fmt.Sprintf("time limit %s is shorter than the estimate of %s, %s (validate's estimate, before any wait in the queue): the allocation would end mid-sweep, and each `mbench resume` asks for another; raise it to at least %s, or use allocation: block",
					h.Slurm.TimeLimit, what, est, est.Round(time.Minute)+time.Minute)})
		}
	}
	return ws
}
