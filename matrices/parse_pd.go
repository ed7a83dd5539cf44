package matrices

import (
	"fmt"
	"maps"

	"go.yaml.in/yaml/v3"
)

// PD splits a config's instances into a PD-separated topology (4P + 4D,
// say): the first Producers instances of the topology, in order,
// prefill; the rest decode. Each group gets its own kv_transfer_config
// (vllm) or sim flags (sim), args and env on top of the config's. The
// router gets the consumers as {{.Targets}} and the producers as
// {{.Producers}} (comma-separated URLs, for `mbench router --prefill`).
type PD struct {
	Producers          int
	Producer, Consumer PDRole
}

// PDRole is what one group of a PD topology adds to its config.
type PDRole struct {
	KVTransferConfig map[string]any
	Sim              map[string]string
	Args             []string
	Env              map[string]EnvValue
}

// Instance roles in a PD topology.
const (
	RoleProducer = "producer"
	RoleConsumer = "consumer"
)

// pd decodes a config's pd section.
func (d *decoder) pd(v *yaml.Node, path string, kind EngineKind) *PD {
	if kind == EngineLlamaCpp {
		d.add(v.Line, path, "remove it (prefill/decode disaggregation needs a KV connector: kinds vllm and sim)", "pd is not available for kind llamacpp")
		return nil
	}
	p := &PD{}
	role := func(r *PDRole) func(v *yaml.Node, fp string) {
		return func(v *yaml.Node, fp string) {
			d.object(v, fp, v.Line, []field{
				{"kv_transfer_config", false, func(v *yaml.Node, fp string) {
					if kind == EngineSim {
						d.add(v.Line, fp, "for kind sim, give the role with sim: {kv_role: ...}", "kv_transfer_config applies to engine.kind vllm")
						return
					}
					r.KVTransferConfig = d.kvTransfer(v, fp)
				}},
				{"sim", false, func(v *yaml.Node, fp string) {
					if kind != EngineSim {
						d.add(v.Line, fp, "remove it (sim flags apply to engine.kind sim)", "sim flags are not allowed for kind %s", kind)
						return
					}
					r.Sim = d.simFlags(v, fp)
				}},
				{"args", false, func(v *yaml.Node, fp string) { r.Args = d.stringList(v, fp) }},
				{"env", false, func(v *yaml.Node, fp string) { r.Env = d.env(v, fp) }},
			})
		}
	}
	d.object(v, path, v.Line, []field{
		{"producers", true, func(v *yaml.Node, fp string) { p.Producers = d.intField(v, fp, 1, 1<<20) }},
		{"producer", true, role(&p.Producer)},
		{"consumer", true, role(&p.Consumer)},
	})
	return p
}

// checkPD checks a PD config against its topology: a router is required
// (the load must go through the proxy that splits prefill from decode), and
// at least one instance must be left to decode.
func (d *decoder) checkPD(m *Matrix, c *Config) {
	if c.PD == nil {
		return
	}
	path := "configs." + c.Name + ".pd"
	n := len(m.topologyHosts(c)) * c.Topology.InstancesPerHost
	if c.PD.Producers >= n {
		d.add(d.lineOf(path+".producers", path), path+".producers", fmt.Sprintf("at most %d (the topology has %d instances; one must decode)", n-1, n),
			"%d producers leave no consumer", c.PD.Producers)
	}
	if c.Router == nil {
		d.add(d.lineOf(path), path, `a router such as {command: "{{.Self}} router --addr {{.Bind}}:{{.RouterPort}} --prefill {{.Producers}} {{.Targets}}", port: 9090}`,
			"a PD-separated topology needs a router")
	}
}

// roleOf returns the PD role of the config's k-th instance ("" without PD)
// and what the role adds.
func roleOf(c *Config, k int) (string, *PDRole) {
	switch {
	case c.PD == nil:
		return "", nil
	case k < c.PD.Producers:
		return RoleProducer, &c.PD.Producer
	}
	return RoleConsumer, &c.PD.Consumer
}

// roleArgv is ConfigArgv for an instance of a PD group: the config's args
// then the role's, the role's kv_transfer_config keys over the config's, the
// role's sim flags over the config's.
func (m *Matrix) roleArgv(c *Config, r *PDRole) ([]string, error) {
	kv := c.KVTransferConfig
	if r.KVTransferConfig != nil {
		kv = map[string]any{}
		maps.Copy(kv, c.KVTransferConfig)
		maps.Copy(kv, r.KVTransferConfig)
	}
	sim := map[string]string{}
	maps.Copy(sim, c.Sim)
	maps.Copy(sim, r.Sim)
	return m.argvOf(c.Name, append(append([]string(nil), c.Args...), r.Args...), kv, sim)
}

// pdSpec is the PD section in a config's resolved spec.
func pdSpec(p *PD) map[string]any {
	role := func(r PDRole) map[string]any {
		args := r.Args
		if args == nil {
			args = []string{}
		}
		return map[string]any{"kv_transfer_config": r.KVTransferConfig, "sim": orEmpty(r.Sim), "args": args, "env": redactMap(r.Env)}
	}
	return map[string]any{"producers": p.Producers, "producer": role(p.Producer), "consumer": role(p.Consumer)}
}
