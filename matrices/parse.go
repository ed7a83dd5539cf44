package matrices

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mbench/mbench/internal/userfile"
	"go.yaml.in/yaml/v3"
)

// maxFileSize bounds what Load reads; matrices are small.
const maxFileSize = 4 << 20

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`) // within a file name, with mbench's prefixes
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	yamlErrRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
)

const nameValid = "letters, digits, _ . - (1 to 100 of them)"

// Load reads the matrix file at path, decodes and validates it, and checks
// that trace files named by shapes exist. On any problem it returns nil and
// an Errors value listing every problem found.
func Load(path string) (*Matrix, error) {
	data, err := userfile.ReadFile(path, "matrix file", maxFileSize)
	if err != nil {
		return nil, Errors{{File: path, Msg: fmt.Sprintf("cannot read matrix: %v", err), cause: err}}
	}
	return parse(path, data, true)
}

func parse(file string, data []byte, checkFiles bool) (*Matrix, error) {
	d := &decoder{file: file, lines: map[string]int{}, secrets: map[yamlPos]bool{}, written: map[string]string{}}
	root, err := decodeYAML(data)
	if err != nil {
		e := yamlError(file, err)
		if e.Line == 0 && strings.Contains(e.Msg, "control characters") { // the scanner names no line
			e.Line, e.Msg = controlLine(data), e.Msg+" (a NUL or another control character; only tab, newline and carriage return may appear)"
		}
		return nil, Errors{e}
	}
	m := &Matrix{File: file, lines: d.lines, source: data, secretAt: d.secrets, written: d.written}
	d.matrix(root, m, checkFiles)
	if len(d.errs) > 0 {
		return nil, d.errs.sorted()
	}
	if err := m.checkSize(); err != nil {
		return nil, Errors{{File: file, Line: m.lines["repeat"], Field: "limits", Msg: err.Error(), cause: err}}
	}
	js, err := m.Resolved()
	if err == nil {
		m.Hash, err = hashJSON(string(js), 16) // sha256, 16 hex digits
	}
	if err != nil {
		return nil, Errors{{File: file, Msg: "cannot hash the resolved matrix: " + err.Error(), cause: err}}
	}
	return m, nil
}

// decodeYAML parses exactly one YAML document into its root node.
func decodeYAML(data []byte) (root *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil { // the YAML library must not take us down
			root, err = nil, fmt.Errorf("yaml: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty")
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("yaml: line %d: a second YAML document starts here (one matrix per file)", extra.Line)
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		return doc.Content[0], nil
	}
	return &doc, nil
}

// yamlError turns a parser error into an Error with the parser's line.
func yamlError(file string, err error) *Error {
	msg := err.Error()
	line := 0
	if sm := yamlErrRE.FindStringSubmatch(msg); sm != nil {
		line, _ = strconv.Atoi(sm[1])
		msg = sm[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	// The parser (unlike the scanner) reports the 0-based line of the
	// collection it was parsing, or nothing for the first line.
	if slices.Contains([]string{"did not find expected key", "did not find expected ',' or ']'",
		"did not find expected ',' or '}'", "did not find expected '-' indicator",
		"did not find expected node content", "did not find expected <document start>"}, msg) {
		line++
	}
	return &Error{File: file, Line: line, Msg: "invalid YAML: " + msg, cause: err}
}

// topKeys lists the top-level keys in documentation order.
var topKeys = []string{"name", "seed", "hosts", "engine", "configs", "rates", "shapes",
	"arrival", "measure", "repeat", "baseline", "compare", "gate", "probe", "class_bounds", "class_basis", "capacity", "slo", "endpoint", "request", "metadata", "limits"}

// matrix decodes the whole document; sections are decoded in dependency
// order whatever their order in the file, and cross-field checks run only on
// sections that decoded cleanly.
func (d *decoder) matrix(root *yaml.Node, m *Matrix, checkFiles bool) {
	nodes := map[string]*yaml.Node{}
	fields := make([]field, len(topKeys))
	for i, k := range topKeys {
		fields[i] = field{name: k, set: func(v *yaml.Node, _ string) { nodes[k] = v }}
		switch k {
		case "name", "seed", "engine", "configs", "shapes": // rates, unless capacity or a closed loop (parse_loadgen.go)
			fields[i].required = true
		}
	}
	if root.Kind != yaml.MappingNode {
		d.add(root.Line, "", "a mapping of "+strings.Join(topKeys, ", "), "expected a mapping at the top level, got %s", describe(root))
		return
	}
	if !d.object(root, "", root.Line, fields) {
		return
	}
	if v := nodes["name"]; v != nil {
		if s, ok := d.str(v, "name"); ok && !nameRE.MatchString(s) {
			d.add(v.Line, "name", nameValid, "invalid name %q", s)
		} else {
			m.Name = s
		}
	}
	if v := nodes["seed"]; v != nil {
		m.Seed, _ = d.integer(v, "seed", math.MinInt64, math.MaxInt64)
	}
	clean := func(f func()) bool { n := len(d.errs); f(); return len(d.errs) == n }
	hostsOK := clean(func() { d.hosts(nodes["hosts"], m) })
	engineOK := nodes["engine"] != nil && clean(func() { d.engine(nodes["engine"], m) })
	configsOK := nodes["configs"] != nil && clean(func() { d.configs(nodes["configs"], m) })
	if v := nodes["rates"]; v != nil {
		d.rates(v, m)
	}
	if v := nodes["shapes"]; v != nil {
		d.shapes(v, m, checkFiles)
	}
	d.limits(nodes["limits"], m)
	line := root.Line
	if v := nodes["rates"]; v != nil {
		line = v.Line
	}
	if !d.checkCells(m, line) {
		return // nothing may expand them
	}
	d.workload(nodes, m)
	d.capacity(nodes, m)
	d.closedLoop(nodes, m, root.Line)
	d.burst(nodes, m)
	d.includeRamp(m)
	d.arrivalRules(m)
	d.baseline(nodes["baseline"], m, configsOK)
	d.classBounds(nodes["class_bounds"], m)
	d.classBasis(nodes["class_basis"], m)
	d.slo(nodes["slo"], m)
	if m.Capacity != nil {
		d.checkConstraints(m.Capacity, m)
	}
	d.endpoint(nodes["endpoint"], m)
	d.request(nodes["request"], m)
	if v := nodes["metadata"]; v != nil {
		ps, _ := d.mapping(v, "metadata")
		for _, kv := range ps {
			if m.Metadata == nil {
				m.Metadata = map[string]string{}
			}
			m.Metadata[kv.key], _ = d.str(kv.v, join("metadata", kv.key))
		}
	}
	if hostsOK && engineOK && configsOK {
		d.placement(m)
	}
}

// hosts decodes the hosts section (default: one local host).
func (d *decoder) hosts(n *yaml.Node, m *Matrix) {
	m.Hosts = map[string]Host{}
	if n == nil {
		m.Hosts["local"] = Host{Name: "local", Address: "local", HostKeyPolicy: "strict", Workdir: "~/.mbench"}
		m.HostOrder = []string{"local"}
		return
	}
	ps, ok := d.mapping(n, "hosts")
	if ok && len(ps) == 0 {
		d.add(n.Line, "hosts", "a mapping such as {gpu0: {address: dash0, gpus: [0]}}", "at least one host is required")
	}
	for _, p := range ps {
		path := join("hosts", p.key)
		if !nameRE.MatchString(p.key) {
			d.add(p.k.Line, path, nameValid, "invalid host name %q", p.key)
			continue
		}
		h := Host{Name: p.key, HostKeyPolicy: "strict", Workdir: "~/.mbench"}
		d.lines[path] = p.k.Line
		d.object(p.v, path, p.k.Line, []field{
			{"address", false, func(v *yaml.Node, fp string) {
				if s, ok := d.str(v, fp); ok {
					if msg := checkAddress(s); msg != "" {
						d.add(v.Line, fp, `"local", an ssh alias, or [user@]host[:port]`, "%s", msg)
					}
					h.Address = s
				}
			}},
			{"gpus", false, func(v *yaml.Node, fp string) { h.GPUs = d.gpuList(v, fp) }},
			{"host_key_policy", false, func(v *yaml.Node, fp string) {
				h.HostKeyPolicy, _ = d.enum(v, fp, "strict", "accept-new", "insecure")
			}},
			{"tunnel", false, func(v *yaml.Node, fp string) { h.Tunnel = d.boolean(v, fp) }},
			{"workdir", false, func(v *yaml.Node, fp string) { h.Workdir = d.nonEmpty(v, fp) }},
			{"mbench_path", false, func(v *yaml.Node, fp string) { h.MbenchPath, _ = d.str(v, fp) }},
			{"slurm", false, func(v *yaml.Node, fp string) { h.Slurm = d.slurm(v, fp) }},
			{"connect_timeout", false, func(v *yaml.Node, fp string) { h.ConnectTimeout = d.positiveDuration(v, fp) }},
		})
		d.checkHostKind(&h, path, p.k.Line)
		m.Hosts[p.key] = h
		m.HostOrder = append(m.HostOrder, p.key)
	}
}

// gpuList decodes a list of distinct GPU indices.
func (d *decoder) gpuList(v *yaml.Node, path string) []int {
	es, ps, ok := d.list(v, path)
	if !ok {
		return nil
	}
	out := []int{}
	seen := map[int64]bool{}
	for i, e := range es {
		x, ok := d.integer(e, ps[i], 0, 1<<20)
		if !ok {
			continue
		}
		if seen[x] {
			d.add(e.Line, ps[i], "distinct GPU indices", "GPU %d is listed twice", x)
			continue
		}
		seen[x] = true
		out = append(out, int(x))
	}
	return out
}

// nonEmpty decodes a non-empty, single-line string.
func (d *decoder) nonEmpty(v *yaml.Node, path string) string {
	s, ok := d.str(v, path)
	if ok && (strings.TrimSpace(s) == "" || strings.ContainsAny(s, "\n\r\x00")) {
		d.add(v.Line, path, "a non-empty single-line string", "invalid value %q", s)
	}
	return s
}

// command decodes a command template: any non-blank text without NUL bytes
// (it runs through a shell, so several lines are allowed).
func (d *decoder) command(v *yaml.Node, path string) string {
	s, ok := d.str(v, path)
	if ok && (strings.TrimSpace(s) == "" || strings.ContainsRune(s, 0)) {
		d.add(v.Line, path, "a command template such as \"vllm serve {{.Model}} --port {{.Port}}\"", "invalid command %q", s)
	}
	return s
}

// checkAddress returns what is wrong with a host address, or "".
func checkAddress(a string) string {
	if a == "local" {
		return ""
	}
	if a == "" || strings.HasPrefix(a, "-") || strings.IndexFunc(a, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Sprintf("invalid address %q", a)
	}
	host := a
	if i := strings.LastIndex(a, "@"); i >= 0 {
		if i == 0 {
			return fmt.Sprintf("invalid address %q: empty user", a)
		}
		host = a[i+1:]
	}
	port := ""
	switch {
	case strings.HasPrefix(host, "["):
		j := strings.Index(host, "]")
		if j < 0 {
			return fmt.Sprintf("invalid address %q: unclosed [", a)
		}
		rest := host[j+1:]
		if rest != "" && !strings.HasPrefix(rest, ":") {
			return fmt.Sprintf("invalid address %q", a)
		}
		host, port = host[1:j], strings.TrimPrefix(rest, ":")
	case strings.Count(host, ":") == 1:
		i := strings.Index(host, ":")
		host, port = host[:i], host[i+1:]
		if port == "" {
			return fmt.Sprintf("invalid address %q: empty port", a)
		}
	}
	if host == "" {
		return fmt.Sprintf("invalid address %q: empty host", a)
	}
	if port != "" {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Sprintf("invalid address %q: port %q is not 1-65535", a, port)
		}
	}
	return ""
}

// engine decodes the engine section and applies kind-specific defaults.
func (d *decoder) engine(n *yaml.Node, m *Matrix) {
	e := Engine{ReadyTimeout: 5 * time.Minute, Grace: 10 * time.Second, Port: 8000, Restart: "on_change"}
	d.object(n, "engine", n.Line, []field{
		{"kind", true, func(v *yaml.Node, p string) {
			k, _ := d.enum(v, p, string(EngineVLLM), string(EngineLlamaCpp), string(EngineSim))
			e.Kind = EngineKind(k)
		}},
		{"command", false, func(v *yaml.Node, p string) { e.Command = d.command(v, p) }},
		{"model", false, func(v *yaml.Node, p string) { e.Model = d.nonEmpty(v, p) }},
		{"env", false, func(v *yaml.Node, p string) { e.Env = d.env(v, p) }},
		{"ready_timeout", false, func(v *yaml.Node, p string) { e.ReadyTimeout = d.positiveDuration(v, p) }},
		{"stagger", false, func(v *yaml.Node, p string) { e.Stagger = d.duration(v, p) }},
		{"grace", false, func(v *yaml.Node, p string) { e.Grace = d.duration(v, p) }},
		{"port", false, func(v *yaml.Node, p string) { e.Port = d.intField(v, p, 1, 65535) }},
		{"instrument", false, func(v *yaml.Node, p string) { e.Instrument = d.boolean(v, p) }},
		{"restart", false, func(v *yaml.Node, p string) { e.Restart, _ = d.enum(v, p, "on_change", "every_run") }},
		{"sim", false, func(v *yaml.Node, p string) { e.Sim = d.simFlags(v, p) }},
		{"token_ids", false, func(v *yaml.Node, p string) { e.TokenIDs = d.tokenIDs(v, p) }},
	})
	line := d.deref(n).Line
	switch e.Kind {
	case EngineVLLM:
		d.externalEngine(&e, line, "vllm serve {{.Model}} --port {{.Port}} {{.ConfigArgs}}", "a model path or id")
	case EngineLlamaCpp:
		d.externalEngine(&e, line, "llama-server -m {{.Model}} --host {{.Bind}} --port {{.Port}} --metrics {{.ConfigArgs}}", "a GGUF model path")
		if l := d.lines["engine.instrument"]; l > 0 && e.Instrument {
			d.add(l, "engine.instrument", "false (instrument applies to kind vllm)", "llama-server has no step-timing plugin: it writes no engine_step.jsonl")
		}
	case EngineSim:
		e.Command = cmp.Or(e.Command, DefaultSimCommand)
		e.Model = cmp.Or(e.Model, "sim-model")
		if l := d.lines["engine.instrument"]; l > 0 && e.Instrument {
			d.add(l, "engine.instrument", "false (instrument applies to kind vllm)", "the sim engine is always instrumented")
		}
	}
	m.Engine = e
}

// externalEngine checks what an engine mbench does not embed needs: a
// command (example: one for the kind) and a model, and no sim flags.
func (d *decoder) externalEngine(e *Engine, line int, example, model string) {
	if e.Command == "" && d.lines["engine.command"] == 0 {
		d.add(line, "engine.command", fmt.Sprintf("a template such as %q", example), "missing required key (kind %s)", e.Kind)
	}
	if e.Model == "" && d.lines["engine.model"] == 0 {
		d.add(line, "engine.model", model, "missing required key (kind %s)", e.Kind)
	}
	if l := d.lines["engine.sim"]; l > 0 {
		d.add(l, "engine.sim", "remove it (sim flags apply to kind sim)", "sim flags are not allowed for kind %s", e.Kind)
	}
}

// DefaultSimCommand launches the simulated engine when engine.command is
// not set for kind sim.
const DefaultSimCommand = "{{.Self}} sim --addr {{.Bind}}:{{.Port}} --step-log {{.StepLog}} --model {{.Model}} {{.ConfigArgs}}"

// positiveDuration is duration, but 0 is an error.
func (d *decoder) positiveDuration(v *yaml.Node, path string) time.Duration {
	n := len(d.errs)
	x := d.duration(v, path)
	if x == 0 && len(d.errs) == n {
		d.add(v.Line, path, "a duration > 0 such as 90s or 15m", "must be greater than zero")
	}
	return x
}

// controlLine is the 1-based line of data's first control character other
// than tab, newline and carriage return (0 when none).
func controlLine(data []byte) int {
	line := 1
	for _, c := range data {
		switch {
		case c == '\n':
			line++
		case c < 0x20 && c != '\t' && c != '\r', c == 0x7f:
			return line
		}
	}
	return 0
}
