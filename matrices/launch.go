package matrices

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/mbench/mbench/engines"
	"github.com/mbench/mbench/shquote"
)

// StepLogEnv names the env var that tells the mbench_vllm plugin where to
// write engine_step.jsonl; it is set on every instance when
// engine.instrument is true.
const StepLogEnv = "MBENCH_STEP_LOG"

// ConfigArgv returns the config's extra engine arguments, unquoted: its args,
// then --kv-transfer-config and its compact JSON (vllm), or the merged
// engine and config sim flags as --flag=value, sorted by flag (sim).
func (m *Matrix) ConfigArgv(config string) ([]string, error) {
	c, ok := m.Configs[config]
	if !ok {
		return nil, m.unknownConfig(config)
	}
	return m.argvOf(config, c.Args, c.KVTransferConfig, c.Sim)
}

// argvOf renders engine arguments from their parts (see ConfigArgv).
func (m *Matrix) argvOf(config string, args []string, kv map[string]any, sim map[string]string) ([]string, error) {
	out := append([]string(nil), args...)
	switch m.Engine.Kind {
	case EngineVLLM:
		if kv != nil {
			js, err := compactJSON(kv)
			if err != nil {
				return nil, fmt.Errorf("configs.%s.kv_transfer_config: %w", config, err)
			}
			out = append(out, "--kv-transfer-config", js)
		}
	case EngineSim:
		flags := map[string]string{}
		maps.Copy(flags, m.Engine.Sim)
		maps.Copy(flags, sim)
		for _, k := range slices.Sorted(maps.Keys(flags)) {
			out = append(out, "--"+k+"="+flags[k])
		}
	}
	return out, nil
}

func (m *Matrix) unknownConfig(config string) error {
	return &Error{File: m.File, Field: "config", Msg: fmt.Sprintf("unknown config %q", config), Valid: strings.Join(m.ConfigOrder, ", ")}
}

// compactJSON encodes v without HTML escaping, map keys sorted.
func compactJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// Launch renders config into concrete processes for rt. Twins (same_as)
// render exactly like their target, so their Key is equal.
func (m *Matrix) Launch(config string, rt Runtime) (*Launch, error) {
	c, ok := m.Configs[config]
	if !ok {
		return nil, m.unknownConfig(config)
	}
	root := cmp.Or(c.SameAs, c.Name)
	cpath := "configs." + root
	argv, err := m.ConfigArgv(config)
	if err != nil {
		return nil, err
	}
	l := &Launch{Kind: m.Engine.Kind, Config: config, ReadyTimeout: m.Engine.ReadyTimeout,
		Stagger: m.Engine.Stagger, Grace: m.Engine.Grace, Instrument: m.Engine.Instrument}
	hosts := m.topologyHosts(c)
	eps, err := m.placeInstances(c, cpath, hosts, rt, l)
	if err != nil {
		return nil, err
	}
	tv := m.newTemplateVars(c, root, shquote.Join(argv), rt, eps)
	var errs Errors
	for k := range l.Instances {
		if err := m.renderInstance(c, cpath, k, &l.Instances[k], eps[k].at, tv, &errs); err != nil {
			return nil, err
		}
	}
	if c.Router != nil {
		l.Router = m.renderRouter(c, cpath, routerHostOf(c, hosts), tv, &errs)
	}
	if len(errs) > 0 {
		return nil, errs.sorted()
	}
	l.Key, err = launchKey(m, l)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// placeInstances places a config's instances on its hosts (ports, GPUs,
// PD roles, bootstrap ports, step logs) into l, and returns where each is
// reached, in the same order.
func (m *Matrix) placeInstances(c *Config, cpath string, hosts []string, rt Runtime, l *Launch) ([]endpoint, error) {
	var eps []endpoint // every instance, for {{.Targets}}, {{.Producers}} and {{.BootstrapPorts}}
	for _, hn := range hosts {
		h, ok := m.Hosts[hn]
		if !ok {
			return nil, m.errAt(cpath+".topology.hosts", fmt.Sprintf("unknown host %q", hn), strings.Join(m.HostOrder, ", "))
		}
		gpi := c.Topology.GPUsPerInstance
		for i := 0; i < c.Topology.InstancesPerHost; i++ {
			in := Instance{Host: hn, Index: i, Port: m.Engine.Port + i}
			if len(h.GPUs) > 0 && gpi > 0 {
				if (i+1)*gpi > len(h.GPUs) {
					return nil, m.errAt(cpath+".topology", fmt.Sprintf("host %s has %d GPUs, too few for instance %d", hn, len(h.GPUs), i), "more GPUs under hosts."+hn+".gpus")
				}
				in.GPUs = append([]int(nil), h.GPUs[i*gpi:(i+1)*gpi]...)
			}
			in.Role, _ = roleOf(c, len(l.Instances))
			if c.BootstrapPort > 0 && in.Role != RoleConsumer { // a kv_consumer runs no bootstrap server
				in.BootstrapPort = c.BootstrapPort + i
			}
			in.StepLog = fmt.Sprintf("%s/engine_step-%s-%d.jsonl", strings.TrimSuffix(h.Workdir, "/"), h.Name, i)
			if rt.StepLog != nil {
				in.StepLog = rt.StepLog(hn, i)
			}
			l.Instances = append(l.Instances, in)
			eps = append(eps, endpoint{place{hn, h.SlurmNode(i, in.GPUs)}, in.Port, in.BootstrapPort, in.Role == RoleProducer})
		}
	}
	return eps, nil
}

// renderInstance renders instance k's command and environment (a PD
// role's arguments and env over the config's), adding template errors to
// errs.
func (m *Matrix) renderInstance(c *Config, cpath string, k int, in *Instance, at place, tv *templateVars, errs *Errors) error {
	cmdVars := tv.vars(at, in.Index, in.Port, in.GPUs, in.BootstrapPort, in.StepLog, true)
	_, role := roleOf(c, k)
	configEnv := c.Env
	if role != nil {
		argv, err := m.roleArgv(c, role)
		if err != nil {
			return err
		}
		cmdVars["ConfigArgs"] = shquote.Join(argv)
		configEnv = map[string]EnvValue{}
		maps.Copy(configEnv, c.Env)
		maps.Copy(configEnv, role.Env)
	}
	var err error
	in.Command, err = m.renderCommand("engine.command", m.Engine.Command, cmdVars)
	*errs = append(*errs, asErrors(err)...)
	if engines.Of(engines.Kind(m.Engine.Kind)).PinGPUs && len(in.GPUs) > 0 && !m.Hosts[in.Host].IsSlurm() { // Slurm binds a step's GPUs itself
		in.Env = append(in.Env, EnvVar{Name: "CUDA_VISIBLE_DEVICES", Value: joinInts(in.GPUs)})
	}
	if m.Engine.Kind == EngineVLLM && m.Engine.Instrument {
		in.Env = append(in.Env, EnvVar{Name: StepLogEnv, Value: in.StepLog})
	}
	envVars := tv.vars(at, in.Index, in.Port, in.GPUs, in.BootstrapPort, in.StepLog, false)
	env, err := m.renderEnv(envVars, "engine.env", m.Engine.Env, cpath+".env", configEnv)
	*errs = append(*errs, asErrors(err)...)
	in.Env = append(in.Env, env...)
	return nil
}

// renderRouter renders the config's router on routerHost, adding template
// errors to errs.
func (m *Matrix) renderRouter(c *Config, cpath, routerHost string, tv *templateVars, errs *Errors) *RouterLaunch {
	r := &RouterLaunch{Host: routerHost, Port: c.Router.Port, ReadyPath: c.Router.ReadyPath}
	at := place{routerHost, 0} // a slurm host's router runs on its first node
	var err error
	r.Command, err = m.renderCommand(cpath+".router.command", c.Router.Command, tv.vars(at, 0, r.Port, nil, c.BootstrapPort, "", true))
	*errs = append(*errs, asErrors(err)...)
	r.Env, err = m.renderEnv(tv.vars(at, 0, r.Port, nil, c.BootstrapPort, "", false), cpath+".router.env", c.Router.Env, "", nil)
	*errs = append(*errs, asErrors(err)...)
	return r
}

// templateVars are the variables of a launch's templates ({{.Targets}},
// {{.Port}}, …) as a process at a place sees them.
type templateVars struct {
	m                                      *Matrix
	root, configArgs, bind, bootstrapPorts string
	rt                                     Runtime
	eps                                    []endpoint
	routerPort                             int
	bounds                                 [3]int
	// seen is {{.Targets}} and {{.Producers}} per place, rendered once per
	// place (once per instance was quadratic in the instances when they
	// share a host).
	seen map[place]placeLists
}

type placeLists struct{ quoted, plain, producers string }

func (m *Matrix) newTemplateVars(c *Config, root, configArgs string, rt Runtime, eps []endpoint) *templateVars {
	t := &templateVars{m: m, root: root, configArgs: configArgs, bind: cmp.Or(rt.Bind, "127.0.0.1"), rt: rt, eps: eps,
		bounds: cmp.Or(m.ClassBounds, defaultClassBounds), seen: map[place]placeLists{}}
	if c.Router != nil {
		t.routerPort = c.Router.Port
	}
	var targetBoot, producerBoot []int // bootstrap ports, aligned with the targets and producers
	for _, e := range eps {
		if e.producer {
			producerBoot = append(producerBoot, e.bootstrap)
		} else {
			targetBoot = append(targetBoot, e.bootstrap)
		}
	}
	prefillBoot := targetBoot // who the router sends prefills to: the producers, or every target
	if c.PD != nil {
		prefillBoot = producerBoot
	}
	if c.BootstrapPort > 0 {
		t.bootstrapPorts = joinInts(prefillBoot)
	}
	return t
}

// urls are the instances' URLs as a process at from reaches them.
func (t *templateVars) urls(from place) (targets, producers []string) {
	for _, e := range t.eps {
		u := "http://" + t.m.reach(e.at, from, t.bind, t.rt) + ":" + strconv.Itoa(e.port)
		if e.producer {
			producers = append(producers, u)
		} else {
			targets = append(targets, u)
		}
	}
	return targets, producers
}

// self is the mbench binary on host hn.
func (t *templateVars) self(hn string) string {
	if t.rt.Self != nil {
		return t.rt.Self(hn)
	}
	return cmp.Or(t.m.Hosts[hn].MbenchPath, "mbench")
}

// vars are the template variables of a process at a place; quote: for a
// shell command line (else an env value, as it is).
func (t *templateVars) vars(at place, index, port int, gpus []int, bootstrap int, stepLog string, quote bool) map[string]any {
	m := t.m
	ls, ok := t.seen[at]
	if !ok {
		targets, producers := t.urls(at)
		ls = placeLists{shquote.Join(targets), strings.Join(targets, " "), strings.Join(producers, ",")}
		t.seen[at] = ls
	}
	q, qp, tg := shquote.Quote, shquote.Path, ls.quoted
	if !quote {
		q = func(s string) string { return s }
		qp, tg = q, ls.plain
	}
	hn := at.host
	nodeName, nodeAddr := m.nodeOf(at, t.bind, t.rt)
	return map[string]any{"Model": qp(m.Engine.Model), "Port": port, "GPUs": joinInts(m.Hosts[hn].nodeGPUs(gpus)),
		"Instance": index, "Host": q(hn), "Address": q(m.Hosts[hn].Address), "ConfigArgs": t.configArgs,
		"Config": q(t.root), "Self": qp(t.self(hn)), "StepLog": qp(stepLog), "BootstrapPort": bootstrap,
		"RouterPort": t.routerPort, "Targets": tg, "Bind": q(t.bind), "Producers": q(ls.producers),
		"BootstrapPorts": q(t.bootstrapPorts), "ClassBounds": q(joinInts(t.bounds[:])),
		"NodeName": q(nodeName), "NodeAddress": q(nodeAddr)}
}

// topologyHosts is the hosts a config's instances run on: its topology's
// hosts, or every host in file order.
func (m *Matrix) topologyHosts(c *Config) []string {
	if len(c.Topology.Hosts) == 0 {
		return m.HostOrder
	}
	return c.Topology.Hosts
}

// routerHostOf is the host of a config's router ("" without one): its
// router.host, or the first of hosts.
func routerHostOf(c *Config, hosts []string) string {
	if c.Router == nil {
		return ""
	}
	if c.Router.Host == "" && len(hosts) > 0 {
		return hosts[0]
	}
	return c.Router.Host
}

// place is where a process runs: a host, and for a slurm host the node of
// its allocation (an index in Slurm's order; 0 for other hosts).
type place struct {
	host string
	node int
}

// endpoint is an instance as {{.Targets}} and {{.Producers}} list it.
type endpoint struct {
	at        place
	port      int
	bootstrap int // its bootstrap server's port (0: none)
	producer  bool
}

// reach is the address at which a process at from reaches a port at to:
// loopback (or the bind address) on the same machine; a slurm node's own
// address (rt.Node: Slurm's NodeAddr) from anywhere else, the router's node
// included; else the host's address without user and port.
func (m *Matrix) reach(to, from place, bind string, rt Runtime) string {
	th := m.Hosts[to.host]
	if to == from || from.host == "" || th.IsLocal() {
		if bind == "0.0.0.0" || bind == "::" || bind == "" {
			return "127.0.0.1"
		}
		return bracket(bind)
	}
	if th.IsSlurm() {
		_, addr := m.nodeOf(to, bind, rt)
		return bracket(addr)
	}
	return bracket(hostOfAddress(th.Address))
}

// nodeOf is {{.NodeName}} and {{.NodeAddress}} at a place: a slurm node's
// name and address once allocated (placeholders before: a dry run, validate),
// an SSH host's address (without user and port) for both, and for this
// machine localhost and the bind address (127.0.0.1 when it binds all).
func (m *Matrix) nodeOf(at place, bind string, rt Runtime) (name, addr string) {
	h := m.Hosts[at.host]
	switch {
	case h.IsSlurm():
		if rt.Node != nil {
			if n, a, ok := rt.Node(at.host, at.node); ok {
				return n, a
			}
		}
		if h.Slurm.Nodes > 1 {
			return fmt.Sprintf("<node %d>", at.node), fmt.Sprintf("<node %d address>", at.node)
		}
		return "<node>", "<node address>"
	case h.IsLocal():
		if bind == "0.0.0.0" || bind == "::" || bind == "" {
			return "localhost", "127.0.0.1"
		}
		return "localhost", bind
	}
	a := hostOfAddress(h.Address)
	return a, a
}

// hostOfAddress is an SSH address without its user and port.
func hostOfAddress(a string) string {
	if i := strings.LastIndex(a, "@"); i >= 0 {
		a = a[i+1:]
	}
	if strings.HasPrefix(a, "[") {
		if j := strings.Index(a, "]"); j > 0 {
			return a[1:j]
		}
	}
	if strings.Count(a, ":") == 1 {
		a = a[:strings.Index(a, ":")]
	}
	return a
}

func bracket(h string) string {
	if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
		return "[" + h + "]"
	}
	return h
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// errAt builds an Error for field, with its line when known.
func (m *Matrix) errAt(field, msg, valid string) *Error {
	return &Error{File: m.File, Line: m.lines[field], Field: field, Msg: msg, Valid: valid}
}

// templateErrAt turns a renderTemplate error into an Error for field.
func (m *Matrix) templateErrAt(field string, err error) *Error {
	var te *templateError
	if errors.As(err, &te) {
		return m.errAt(field, te.msg, te.valid)
	}
	return m.errAt(field, err.Error(), "")
}

// renderCommand renders a command template and checks the result.
func (m *Matrix) renderCommand(field, src string, data map[string]any) (string, error) {
	out, err := renderTemplate(src, data)
	if err != nil {
		return "", m.templateErrAt(field, err)
	}
	out = strings.TrimSpace(out)
	if out == "" || strings.ContainsRune(out, 0) {
		return "", m.errAt(field, "renders to an empty command or one with a NUL byte", "a command line")
	}
	return out, nil
}

// renderEnv renders base then over (over wins), sorted by name.
func (m *Matrix) renderEnv(data map[string]any, basePath string, base map[string]EnvValue, overPath string, over map[string]EnvValue) ([]EnvVar, error) {
	merged := map[string]EnvValue{}
	paths := map[string]string{}
	for k, v := range base {
		merged[k], paths[k] = v, basePath+"."+k
	}
	for k, v := range over {
		merged[k], paths[k] = v, overPath+"."+k
	}
	var out []EnvVar
	var errs Errors
	for _, k := range slices.Sorted(maps.Keys(merged)) {
		v := merged[k]
		val, err := renderTemplate(v.Value, data)
		if err != nil {
			errs = append(errs, m.templateErrAt(paths[k], err))
			continue
		}
		if strings.ContainsRune(val, 0) {
			errs = append(errs, m.errAt(paths[k], "renders to a value with a NUL byte", "text without NUL bytes"))
			continue
		}
		out = append(out, EnvVar{Name: k, Value: val, Secret: v.Secret})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// launchKey hashes everything that defines the running processes (secret
// values redacted), but not the config name.
func launchKey(m *Matrix, l *Launch) (string, error) {
	type inst struct {
		Host, Address string
		Index, Port   int
		GPUs          []int
		Command       string
		Env           []EnvVar
		Bootstrap     int
		StepLog       string
		Role          string `json:",omitempty"`
	}
	spec := struct {
		Kind       EngineKind
		Instrument bool
		Instances  []inst
		Router     *RouterLaunch
	}{Kind: l.Kind, Instrument: l.Instrument}
	for _, in := range l.Instances {
		spec.Instances = append(spec.Instances, inst{in.Host, m.Hosts[in.Host].Address, in.Index, in.Port, in.GPUs,
			in.Command, redactEnv(in.Env), in.BootstrapPort, in.StepLog, in.Role})
	}
	if l.Router != nil {
		r := *l.Router
		r.Env = redactEnv(r.Env)
		spec.Router = &r
	}
	return hashJSON(spec, 16)
}

func redactEnv(env []EnvVar) []EnvVar {
	out := make([]EnvVar, len(env))
	for i, e := range env {
		if e.Secret {
			e.Value = redacted
		}
		out[i] = e
	}
	return out
}
