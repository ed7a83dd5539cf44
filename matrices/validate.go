package matrices

import (
	"fmt"
	"strings"

	"github.com/mbench/mbench/engines"
)

// maxInstances bounds the instances of one config (hosts × instances_per_host).
const maxInstances = 4096

// placement checks what needs hosts, engine and configs together: topology
// hosts, GPU counts, port ranges and collisions, and that every template
// renders (with placeholder runtime values).
func (d *decoder) placement(m *Matrix) {
	d.slurmDefaults(m)
	for _, name := range m.ConfigOrder {
		c := m.Configs[name]
		if c.SameAs != "" {
			continue // a twin launches exactly like its target, checked there
		}
		n := len(d.errs)
		d.placeConfig(m, c)
		d.checkPD(m, c)
		if len(d.errs) > n {
			continue
		}
		if _, err := m.Launch(name, Runtime{}); err != nil {
			d.errs = append(d.errs, asErrors(err)...)
		}
	}
}

// lineOf returns the line of the first of fields that is known.
func (d *decoder) lineOf(fields ...string) int {
	for _, f := range fields {
		if l := d.lines[f]; l > 0 {
			return l
		}
	}
	return 0
}

func (d *decoder) placeConfig(m *Matrix, c *Config) {
	path := "configs." + c.Name
	t := c.Topology
	hosts := m.topologyHosts(c)
	seen := map[string]bool{}
	for i, hn := range hosts {
		fp := fmt.Sprintf("%s.topology.hosts[%d]", path, i)
		if _, ok := m.Hosts[hn]; !ok {
			d.add(d.lineOf(fp), fp, strings.Join(m.HostOrder, ", "), "unknown host %q%s", hn, suggest(hn, m.HostOrder))
		} else if seen[hn] {
			d.add(d.lineOf(fp), fp, "each host once", "host %q is listed twice", hn)
		}
		seen[hn] = true
	}
	if c.Router != nil && c.Router.Host != "" {
		if _, ok := m.Hosts[c.Router.Host]; !ok {
			fp := path + ".router.host"
			d.add(d.lineOf(fp), fp, strings.Join(m.HostOrder, ", "), "unknown host %q%s", c.Router.Host, suggest(c.Router.Host, m.HostOrder))
		}
	}
	topoLine := d.lineOf(path+".topology", path)
	if total := len(hosts) * t.InstancesPerHost; total > maxInstances {
		d.add(topoLine, path+".topology", fmt.Sprintf("at most %d instances per config", maxInstances), "%d hosts × %d instances is too many", len(hosts), t.InstancesPerHost)
		return
	}
	if !engines.Of(engines.Kind(m.Engine.Kind)).CPUOnly && t.GPUsPerInstance == 0 {
		fp := path + ".topology.gpus_per_instance"
		d.add(d.lineOf(fp, path), fp, "an integer ≥ 1 (0 is only valid for kinds llamacpp and sim)", "a vLLM instance needs at least one GPU")
	}
	need := t.InstancesPerHost * t.GPUsPerInstance
	for _, hn := range hosts {
		h, ok := m.Hosts[hn]
		// A simulated engine may ask for GPUs a host does not list (it uses
		// none), except on a slurm host: Slurm binds what a step asks for,
		// and a job that asks for none has none to bind.
		if !ok || need == 0 || (m.Engine.Kind == EngineSim && len(h.GPUs) == 0 && !h.IsSlurm()) {
			continue
		}
		d.checkSlurmSpan(h, hn, path, t.InstancesPerHost, t.GPUsPerInstance)
		if h.IsSlurm() && h.Slurm.GPUsPerNode == 0 {
			fp := "hosts." + hn + ".slurm.gpus_per_node"
			d.add(topoLine, path+".topology", fmt.Sprintf("%s of at least %d (the GPUs each node's job asks for), or gpus_per_instance: 0", fp, t.GPUsPerInstance),
				"instances of %d GPU(s) on slurm host %s, which asks Slurm for no GPUs (%s is 0): its engines would run without any", t.GPUsPerInstance, hn, fp)
		} else if len(h.GPUs) < need && h.IsSlurm() {
			d.add(topoLine, path+".topology",
				fmt.Sprintf("hosts.%s.slurm.gpus_per_node × nodes of at least %d, or fewer instances_per_host / gpus_per_instance", hn, need),
				"too few GPUs on slurm host %s: %d instance(s) × %d GPU(s) need %d, the allocation asks %d per node × %d node(s)",
				hn, t.InstancesPerHost, t.GPUsPerInstance, need, h.Slurm.GPUsPerNode, h.Slurm.Nodes)
		} else if len(h.GPUs) < need {
			d.add(topoLine, path+".topology",
				fmt.Sprintf("at least %d GPUs under hosts.%s.gpus, or fewer instances_per_host / gpus_per_instance", need, hn),
				"too few GPUs on host %s: %d instance(s) × %d GPU(s) need %d, the host lists %d",
				hn, t.InstancesPerHost, t.GPUsPerInstance, need, len(h.GPUs))
		}
	}
	last := t.InstancesPerHost - 1
	if m.Engine.Port+last > 65535 {
		d.add(d.lineOf("engine.port", path), "engine.port", fmt.Sprintf("at most %d for %d instances", 65535-last, last+1), "port %d+%d is beyond 65535", m.Engine.Port, last)
		return
	}
	if c.BootstrapPort > 0 && c.BootstrapPort+last > 65535 {
		fp := path + ".bootstrap_port"
		d.add(d.lineOf(fp), fp, fmt.Sprintf("at most %d for %d instances", 65535-last, last+1), "port %d+%d is beyond 65535", c.BootstrapPort, last)
		return
	}
	d.portClashes(m, c, hosts)
}

// portClashes reports two processes of one config wanting one port on a host.
func (d *decoder) portClashes(m *Matrix, c *Config, hosts []string) {
	path := "configs." + c.Name
	routerHost := routerHostOf(c, hosts)
	for h, hn := range hosts {
		used := map[int]string{}
		claim := func(port int, who, field string) {
			if prev, ok := used[port]; ok {
				d.add(d.lineOf(field, path), field, "distinct ports for instances, bootstrap servers and the router", "port %d of %s collides with %s on host %s", port, who, prev, hn)
				return
			}
			used[port] = who
		}
		for i := 0; i < c.Topology.InstancesPerHost; i++ {
			claim(m.Engine.Port+i, fmt.Sprintf("instance %d", i), "engine.port")
		}
		if c.BootstrapPort > 0 {
			for i := 0; i < c.Topology.InstancesPerHost; i++ {
				if role, _ := roleOf(c, h*c.Topology.InstancesPerHost+i); role != RoleConsumer { // a consumer serves none
					claim(c.BootstrapPort+i, fmt.Sprintf("bootstrap server %d", i), path+".bootstrap_port")
				}
			}
		}
		if c.Router != nil && hn == routerHost {
			claim(c.Router.Port, "the router", path+".router.port")
		}
	}
}
