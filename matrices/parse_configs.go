package matrices

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

var (
	simFlagRE = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
)

// reservedSimFlags are set by the command template, not by sim: maps.
var reservedSimFlags = []string{"addr", "step-log", "model"}

// configs decodes the configs section, keeping file order, and resolves A/A
// twins (same_as).
func (d *decoder) configs(n *yaml.Node, m *Matrix) {
	m.Configs = map[string]*Config{}
	ps, ok := d.mapping(n, "configs")
	if ok && len(ps) == 0 {
		d.add(n.Line, "configs", "a mapping such as {plain: {}}", "at least one config is required")
	}
	kind := m.Engine.Kind
	for _, p := range ps {
		path := join("configs", p.key)
		if !nameRE.MatchString(p.key) {
			d.add(p.k.Line, path, nameValid, "invalid config name %q", p.key)
			continue
		}
		c := &Config{Name: p.key, Topology: Topology{InstancesPerHost: 1, GPUsPerInstance: 1}}
		d.lines[path] = p.k.Line
		d.object(p.v, path, p.k.Line, []field{
			{"same_as", false, func(v *yaml.Node, fp string) { c.SameAs, _ = d.str(v, fp) }},
			{"kv_transfer_config", false, func(v *yaml.Node, fp string) { c.KVTransferConfig = d.kvTransfer(v, fp) }},
			{"args", false, func(v *yaml.Node, fp string) { c.Args = d.stringList(v, fp) }},
			{"env", false, func(v *yaml.Node, fp string) { c.Env = d.env(v, fp) }},
			{"sim", false, func(v *yaml.Node, fp string) { c.Sim = d.simFlags(v, fp) }},
			{"topology", false, func(v *yaml.Node, fp string) { d.topology(v, fp, &c.Topology) }},
			{"bootstrap_port", false, func(v *yaml.Node, fp string) { c.BootstrapPort = d.intField(v, fp, 1, 65535) }},
			{"router", false, func(v *yaml.Node, fp string) { c.Router = d.router(v, fp) }},
			{"pd", false, func(v *yaml.Node, fp string) { c.PD = d.pd(v, fp, kind) }},
		})
		if l := d.lines[path+".sim"]; l > 0 && kind != EngineSim {
			d.add(l, path+".sim", "remove it (sim flags apply to engine.kind sim)", "sim flags are not allowed for kind %s", kind)
		}
		if l := d.lines[path+".kv_transfer_config"]; l > 0 && kind == EngineSim {
			d.add(l, path+".kv_transfer_config", "for kind sim, model the connector with sim: {connector: ...}", "kv_transfer_config applies to engine.kind vllm")
		} else if l > 0 && kind != EngineVLLM {
			d.add(l, path+".kv_transfer_config", "remove it (a KV-transfer connector is vLLM's)", "kv_transfer_config applies to engine.kind vllm")
		}
		if l := d.lines[path+".same_as"]; l > 0 {
			for _, k := range []string{"kv_transfer_config", "args", "env", "sim", "topology", "bootstrap_port", "router", "pd"} {
				if kl := d.lines[path+"."+k]; kl > 0 {
					d.add(kl, path+"."+k, "same_as alone (an A/A twin launches exactly like its target)", "cannot be combined with same_as")
				}
			}
		}
		m.Configs[p.key] = c
		m.ConfigOrder = append(m.ConfigOrder, p.key)
	}
	roots := slices.DeleteFunc(slices.Clone(m.ConfigOrder), func(name string) bool { return m.Configs[name].SameAs != "" })
	for _, name := range m.ConfigOrder {
		c := m.Configs[name]
		if c.SameAs == "" {
			continue
		}
		fp := "configs." + name + ".same_as"
		t, ok := m.Configs[c.SameAs]
		switch {
		case !ok:
			d.add(d.lines[fp], fp, strings.Join(roots, ", "), "unknown config %q%s", c.SameAs, suggest(c.SameAs, roots))
		case t == c:
			d.add(d.lines[fp], fp, strings.Join(roots, ", "), "a config cannot be its own twin")
		case t.SameAs != "":
			d.add(d.lines[fp], fp, strings.Join(roots, ", "), "%q is itself an A/A twin (same_as: %s)", t.Name, t.SameAs)
		default:
			cp := *t
			cp.Name, cp.SameAs = c.Name, t.Name
			*c = cp
		}
	}
}

// topology decodes a config's placement.
func (d *decoder) topology(v *yaml.Node, path string, t *Topology) {
	d.object(v, path, v.Line, []field{
		{"hosts", false, func(v *yaml.Node, fp string) {
			t.Hosts = d.stringList(v, fp)
			if len(t.Hosts) == 0 && d.lines[fp] > 0 && v.Kind == yaml.SequenceNode {
				d.add(v.Line, fp, "a list of host names", "at least one host is required")
			}
		}},
		{"instances_per_host", false, func(v *yaml.Node, fp string) { t.InstancesPerHost = d.intField(v, fp, 1, 1024) }},
		{"gpus_per_instance", false, func(v *yaml.Node, fp string) { t.GPUsPerInstance = d.intField(v, fp, 0, 64) }},
	})
}

// router decodes a config's router.
func (d *decoder) router(v *yaml.Node, path string) *Router {
	r := &Router{ReadyPath: "/health"}
	d.object(v, path, v.Line, []field{
		{"command", true, func(v *yaml.Node, fp string) { r.Command = d.command(v, fp) }},
		{"host", false, func(v *yaml.Node, fp string) { r.Host, _ = d.str(v, fp) }},
		{"port", true, func(v *yaml.Node, fp string) { r.Port = d.intField(v, fp, 1, 65535) }},
		{"ready_path", false, func(v *yaml.Node, fp string) {
			r.ReadyPath = d.nonEmpty(v, fp)
			if !strings.HasPrefix(r.ReadyPath, "/") {
				d.add(v.Line, fp, "an HTTP path starting with /, such as /health", "invalid path %q", r.ReadyPath)
			}
		}},
		{"env", false, func(v *yaml.Node, fp string) { r.Env = d.env(v, fp) }},
	})
	return r
}

// kvTransfer decodes a kv_transfer_config: kv_connector and kv_role are
// required and checked; every other key is passed through to vLLM.
func (d *decoder) kvTransfer(v *yaml.Node, path string) map[string]any {
	ps, ok := d.mapping(v, path)
	if !ok {
		return nil
	}
	out := map[string]any{}
	for _, p := range ps {
		fp := join(path, p.key)
		val := d.deref(p.v)
		if val == nil {
			continue
		}
		d.lines[fp] = val.Line
		switch p.key {
		case "kv_connector":
			out[p.key] = d.nonEmpty(val, fp)
		case "kv_role":
			out[p.key], _ = d.enum(val, fp, "kv_producer", "kv_consumer", "kv_both")
		default:
			out[p.key] = d.freeValue(val, fp, 0)
		}
	}
	for _, k := range []string{"kv_connector", "kv_role"} {
		if _, ok := out[k]; !ok {
			valid := "a connector class name such as MooncakeConnector"
			if k == "kv_role" {
				valid = "kv_producer, kv_consumer, kv_both"
			}
			d.add(v.Line, join(path, k), valid, "missing required key")
		}
	}
	return out
}

// freeValue converts any YAML value into a JSON-encodable value.
func (d *decoder) freeValue(v *yaml.Node, path string, depth int) any {
	if v = d.deref(v); v == nil {
		return nil
	}
	if depth > maxDepth {
		if len(path) > 60 {
			path = path[:60] + "…"
		}
		d.add(v.Line, path, "shallower nesting", "value nested too deeply")
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		out := map[string]any{}
		for _, p := range d.pairs(v, path, 0) {
			out[p.key] = d.freeValue(p.v, join(path, p.key), depth+1)
		}
		return out
	case yaml.SequenceNode:
		if !d.spend(len(v.Content)+1, v.Line) {
			return nil
		}
		out := make([]any, 0, len(v.Content))
		for i, e := range v.Content {
			out = append(out, d.freeValue(e, path+"["+strconv.Itoa(i)+"]", depth+1))
		}
		return out
	case yaml.ScalarNode:
		switch v.ShortTag() {
		case "!!null":
			return nil
		case "!!bool":
			var b bool
			_ = v.Decode(&b)
			return b
		case "!!int":
			var x int64
			if v.Decode(&x) == nil {
				return x
			}
		case "!!float":
			var f float64
			if v.Decode(&f) == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f
			}
			d.add(v.Line, path, "a finite number", "%s cannot be encoded as JSON", v.Value)
			return nil
		}
		return v.Value
	}
	d.add(v.Line, path, "a scalar, list or mapping", "unsupported value %s", describe(v))
	return nil
}

// stringList decodes a list of scalars as strings (no NUL bytes).
func (d *decoder) stringList(v *yaml.Node, path string) []string {
	es, ps, ok := d.list(v, path)
	if !ok {
		return nil
	}
	out := []string{}
	for i, e := range es {
		s, ok := d.str(e, ps[i])
		if ok && strings.ContainsRune(s, 0) {
			d.add(e.Line, ps[i], "text without NUL bytes", "contains a NUL byte")
			continue
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

// scalarText decodes a scalar into its canonical text: integers in decimal,
// numbers in shortest form, booleans as true/false, strings as written.
func (d *decoder) scalarText(v *yaml.Node, path string) string {
	if v.Kind != yaml.ScalarNode || isNull(v) {
		d.add(v.Line, path, "a string, number or boolean", "expected a scalar value, got %s", describe(v))
		return ""
	}
	switch v.ShortTag() {
	case "!!int":
		var x int64
		if v.Decode(&x) == nil {
			return strconv.FormatInt(x, 10)
		}
	case "!!float":
		var f float64
		if v.Decode(&f) == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
	case "!!bool":
		var b bool
		if v.Decode(&b) == nil {
			return strconv.FormatBool(b)
		}
	}
	if strings.ContainsRune(v.Value, 0) {
		d.add(v.Line, path, "text without NUL bytes", "contains a NUL byte")
		return ""
	}
	return v.Value
}

// env decodes NAME: value or NAME: {value: v, secret: true}.
func (d *decoder) env(v *yaml.Node, path string) map[string]EnvValue {
	ps, _ := d.mapping(v, path)
	out := map[string]EnvValue{}
	for _, p := range ps {
		fp := join(path, p.key)
		if !envNameRE.MatchString(p.key) {
			d.add(p.k.Line, fp, "[A-Za-z_][A-Za-z0-9_]*", "invalid environment variable name %q", p.key)
			continue
		}
		if p.key == "CUDA_VISIBLE_DEVICES" {
			d.add(p.k.Line, fp, "list the GPUs under hosts.<name>.gpus", "CUDA_VISIBLE_DEVICES is set by mbench from the topology")
			continue
		}
		val := d.deref(p.v)
		if val == nil {
			continue
		}
		d.lines[fp] = val.Line
		ev := EnvValue{Secret: secretEnvName(p.key)}
		valNode := val
		if val.Kind == yaml.MappingNode {
			d.object(val, fp, val.Line, []field{
				{"value", true, func(v *yaml.Node, vp string) {
					ev.Value = d.scalarText(v, vp)
					d.lines[fp] = v.Line
					valNode = d.deref(v)
				}},
				{"secret", false, func(v *yaml.Node, vp string) { ev.Secret = d.boolean(v, vp) || ev.Secret }},
			})
		} else {
			ev.Value = d.scalarText(val, fp)
		}
		if ev.Secret && valNode != nil {
			d.secret(valNode)
		}
		out[p.key] = ev
	}
	return out
}

// simFlags decodes {flag_name: value}; names are stored in their command
// line form (underscores become dashes).
func (d *decoder) simFlags(v *yaml.Node, path string) map[string]string {
	ps, _ := d.mapping(v, path)
	out := map[string]string{}
	for _, p := range ps {
		fp := join(path, p.key)
		flag := strings.ReplaceAll(p.key, "_", "-")
		switch {
		case !simFlagRE.MatchString(p.key):
			d.add(p.k.Line, fp, "lower-case flag names such as step_base_us", "invalid sim flag name %q", p.key)
			continue
		case slices.Contains(reservedSimFlags, flag):
			d.add(p.k.Line, fp, "any sim flag except "+strings.Join(reservedSimFlags, ", "), "--%s is set by the command template", flag)
			continue
		}
		if _, dup := out[flag]; dup {
			d.add(p.k.Line, fp, "each flag once", "flag --%s is given twice", flag)
			continue
		}
		if val := d.deref(p.v); val != nil {
			d.lines[fp] = val.Line
			out[flag] = d.scalarText(val, fp)
		}
	}
	return out
}
