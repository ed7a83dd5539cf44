package matrices

import (
	"errors"
	"fmt"
	"github.com/mbench/mbench/internal/userfile"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// rates decodes the non-empty list of distinct positive rates.
func (d *decoder) rates(v *yaml.Node, m *Matrix) {
	es, ps, ok := d.list(v, "rates")
	if ok && len(es) == 0 {
		d.add(v.Line, "rates", "a list of req/s such as [0.5, 1, 2]", "at least one rate is required")
	}
	seen := map[float64]int{}
	for i, e := range es {
		r, ok := d.number(e, ps[i], true)
		if !ok {
			continue
		}
		if err := openloop.CheckRate(r); err != nil {
			d.add(e.Line, ps[i], "a number > 0", "%s", err.(*openloop.FieldError).Msg)
			continue
		}
		if first, dup := seen[r]; dup {
			d.add(e.Line, ps[i], "distinct rates", "rate %v is listed twice (first at line %d)", r, first)
			continue
		}
		seen[r] = e.Line
		m.Rates = append(m.Rates, r)
	}
}

// shapes decodes the non-empty list of uniquely named shapes.
func (d *decoder) shapes(v *yaml.Node, m *Matrix, checkFiles bool) {
	es, ps, ok := d.list(v, "shapes")
	if ok && len(es) == 0 {
		d.add(v.Line, "shapes", "a list such as [{input: 4096, output: 256}]", "at least one shape is required")
	}
	seen := map[string]int{}
	for i, e := range es {
		n := len(d.errs)
		s := d.shape(e, ps[i], m.File, checkFiles)
		d.shapeRules(s, ps[i], n)
		if len(d.errs) > n {
			continue
		}
		if first, dup := seen[s.Name]; dup {
			d.add(e.Line, ps[i]+".name", "a distinct name per shape", "duplicate shape name %q (first at line %d)", s.Name, first)
			continue
		}
		seen[s.Name] = e.Line
		m.Shapes = append(m.Shapes, s)
	}
}

const maxTokens = 10_000_000

// shape decodes one shape and applies its defaults.
func (d *decoder) shape(e *yaml.Node, path, file string, checkFiles bool) openloop.Shape {
	var s openloop.Shape
	var src string // the trace's or dataset's path as written
	d.object(e, path, e.Line, []field{
		{"name", false, func(v *yaml.Node, p string) {
			if s.Name, _ = d.str(v, p); s.Name != "" && !nameRE.MatchString(s.Name) {
				d.add(v.Line, p, nameValid, "invalid shape name %q", s.Name)
			}
		}},
		{"input", false, func(v *yaml.Node, p string) { s.Input = d.intField(v, p, 1, maxTokens) }},
		{"output", false, func(v *yaml.Node, p string) { s.Output = d.intField(v, p, 1, maxTokens) }},
		{"input_dist", false, func(v *yaml.Node, p string) { s.InputDist = d.dist(v, p) }},
		{"output_dist", false, func(v *yaml.Node, p string) { s.OutputDist = d.dist(v, p) }},
		{"prefix", false, func(v *yaml.Node, p string) {
			s.Prefix = &openloop.Prefix{}
			d.object(v, p, v.Line, []field{
				{"num_prefixes", true, func(v *yaml.Node, p string) { s.Prefix.NumPrefixes = d.intField(v, p, 1, 1<<20) }},
				{"prefix_tokens", true, func(v *yaml.Node, p string) { s.Prefix.PrefixTokens = d.intField(v, p, 1, maxTokens) }},
			})
		}},
		{"cache_fill", false, func(v *yaml.Node, p string) {
			s.CacheFill = &openloop.CacheFill{}
			d.object(v, p, v.Line, []field{
				{"prefixes", true, func(v *yaml.Node, p string) { s.CacheFill.Prefixes = d.intField(v, p, 1, 1<<20) }},
				{"prefix_tokens", true, func(v *yaml.Node, p string) { s.CacheFill.PrefixTokens = d.intField(v, p, 1, maxTokens) }},
			})
		}},
		{"trace", false, func(v *yaml.Node, p string) { s.Trace = d.trace(v, p, file, &src, checkFiles) }},
		{"dataset", false, func(v *yaml.Node, p string) { s.Dataset = d.dataset(v, p, file, &src) }},
	})
	defer func() {
		if src != "" {
			d.written[s.Name] = src
		}
	}()
	has := func(k string) int { return d.lines[path+"."+k] }
	if s.Dataset != nil {
		d.datasetShape(&s, src, path, e.Line, checkFiles)
		return s
	}
	if s.Trace != nil {
		for _, k := range []string{"input", "output", "input_dist", "output_dist", "prefix", "cache_fill"} {
			if l := has(k); l > 0 {
				d.add(l, path+"."+k, "name and trace only (lengths come from the trace)", "cannot be combined with trace")
			}
		}
		if s.Name == "" {
			base := filepath.Base(src)
			s.Name = strings.TrimSuffix(base, filepath.Ext(base))
			if !nameRE.MatchString(s.Name) {
				d.add(e.Line, path+".name", nameValid, "missing name (the trace file name %q is not a valid shape name)", base)
			}
		}
		return s
	}
	for _, lens := range [][2]string{{"input", "input_dist"}, {"output", "output_dist"}} {
		switch {
		case has(lens[0]) > 0 && has(lens[1]) > 0:
			d.add(has(lens[1]), path+"."+lens[1], lens[0]+" or "+lens[1]+", not both", "conflicts with %s", lens[0])
		case has(lens[0]) == 0 && has(lens[1]) == 0:
			d.add(e.Line, path+"."+lens[0], "a token count, or "+lens[1]+", or trace", "missing required key")
		}
	}
	if s.Name == "" && has("name") == 0 {
		if s.InputDist != nil || s.OutputDist != nil {
			d.add(e.Line, path+".name", nameValid, "missing required key (a shape with a length distribution needs a name)")
		} else {
			s.Name = fmt.Sprintf("%dx%d", s.Input, s.Output)
		}
	}
	return s
}

// shapeRules places each rule of the load generator's that shape s breaks
// (openloop.Shape.Problems) at its field; n is the count of errors before
// the shape was decoded. Where the decoder refused some of the shape's
// keys, a rule at a key it refused or at one not written is its report
// already (the value is not the user's), and a trace or dataset shape is
// left at the decoder's report of its keys' conflicts.
func (d *decoder) shapeRules(s openloop.Shape, path string, n int) {
	clean := len(d.errs) == n
	if !clean && (s.Trace != nil || s.Dataset != nil) {
		return
	}
	for _, fe := range s.Problems() {
		f := join(path, fe.Path)
		if clean || d.lines[f] > 0 && !slices.ContainsFunc(d.errs[n:], func(e *Error) bool { return e.Field == f }) {
			d.spec(fe, path, "")
		}
	}
}

// dist decodes a length distribution.
func (d *decoder) dist(v *yaml.Node, path string) *openloop.Dist {
	x := &openloop.Dist{}
	d.object(v, path, v.Line, []field{
		{"kind", true, func(v *yaml.Node, p string) { x.Kind, _ = d.enum(v, p, "uniform", "lognormal") }},
		{"min", false, func(v *yaml.Node, p string) { x.Min = d.intField(v, p, 1, maxTokens) }},
		{"max", false, func(v *yaml.Node, p string) { x.Max = d.intField(v, p, 1, maxTokens) }},
		{"median", false, func(v *yaml.Node, p string) { x.Median, _ = d.number(v, p, true) }},
		{"p90", false, func(v *yaml.Node, p string) { x.P90, _ = d.number(v, p, true) }},
	})
	has := func(k string) int { return d.lines[path+"."+k] }
	switch x.Kind {
	case "uniform":
		for _, k := range []string{"min", "max"} {
			if has(k) == 0 {
				d.add(v.Line, path+"."+k, "an integer ≥ 1", "missing required key (kind uniform)")
			}
		}
		for _, k := range []string{"median", "p90"} {
			if l := has(k); l > 0 {
				d.add(l, path+"."+k, "min and max (kind uniform)", "not used by kind uniform")
			}
		}
	case "lognormal":
		for _, k := range []string{"median", "p90"} {
			if has(k) == 0 {
				d.add(v.Line, path+"."+k, "a number > 0", "missing required key (kind lognormal)")
			}
		}
	}
	return x
}

// besideMatrix resolves a file path as written in the matrix file against
// that file's directory (absolute and ~ paths as they are).
func besideMatrix(src, file string) string {
	if src != "" && !filepath.IsAbs(src) && !strings.HasPrefix(src, "~") {
		return filepath.Join(filepath.Dir(file), src)
	}
	return src
}

// trace decodes a trace replay; its path resolves against the matrix file
// (src: as written).
func (d *decoder) trace(v *yaml.Node, path, file string, src *string, checkFiles bool) *openloop.Trace {
	t := &openloop.Trace{TimeScale: 1}
	d.object(v, path, v.Line, []field{
		{"path", true, func(v *yaml.Node, p string) {
			*src = d.nonEmpty(v, p)
			t.Path = besideMatrix(*src, file)
			if checkFiles && *src != "" {
				if fi, err := os.Stat(t.Path); err != nil || fi.IsDir() {
					d.add(v.Line, p, "a trace file (JSONL) relative to the matrix file", "cannot read trace %s", t.Path)
				} else {
					// The trace format is the load generator's: checked with its
					// parser, so a bad line is refused before anything launches.
					if _, err := openloop.LoadTrace(t.Path); errors.Is(err, userfile.ErrRefused) {
						d.add(v.Line, p, "a trace file (JSONL) relative to the matrix file", "%v", strings.TrimPrefix(err.Error(), "trace: "))
					} else if err != nil {
						d.add(v.Line, p, "one JSON object a line with timestamp (ms), input_length, output_length, hash_ids", "bad trace: %v", err)
					}
				}
			}
		}},
		{"time_scale", false, func(v *yaml.Node, p string) { t.TimeScale, _ = d.number(v, p, true) }},
		{"request_limit", false, func(v *yaml.Node, p string) { t.RequestLimit = d.intField(v, p, 0, 1<<31-1) }},
		{"max_inflight_sessions", false, func(v *yaml.Node, p string) { t.MaxInflightSessions = d.intField(v, p, 0, 1<<31-1) }},
	})
	return t
}

// workload decodes arrival, measure, repeat, compare, gate and probe.
func (d *decoder) workload(nodes map[string]*yaml.Node, m *Matrix) {
	d.arrival(nodes["arrival"], m)
	d.measure(nodes["measure"], m)
	d.repeat(nodes["repeat"], m)
	d.compare(nodes["compare"], m)
	d.gate(nodes["gate"], m)
	d.probe(nodes["probe"], m)
}

// arrival decodes arrival: the process, its levels or ramp and cap (their
// rules are the load generator's: arrivalRules).
func (d *decoder) arrival(v *yaml.Node, m *Matrix) {
	m.Arrival = openloop.Arrival{Process: openloop.ArrivalPoisson, Burstiness: 1}
	d.object(v, "arrival", 1, []field{
		{"process", false, func(v *yaml.Node, p string) {
			m.Arrival.Process, _ = d.enum(v, p, append(slices.Clone(openloop.ArrivalProcesses), ArrivalBurst)...)
		}},
		{"burstiness", false, func(v *yaml.Node, p string) { m.Arrival.Burstiness, _ = d.number(v, p, true) }},
		{"in_flight", false, func(v *yaml.Node, p string) { d.inFlight(v, p, m) }},
		{"ramp", false, func(v *yaml.Node, p string) { m.Arrival.Ramp = d.ramp(v, p) }},
		{"max_in_flight", false, func(v *yaml.Node, p string) { m.Arrival.MaxInFlight = d.intField(v, p, 1, openloop.MaxInFlight) }},
	})
	if l := d.lines["arrival.burstiness"]; l > 0 && m.Arrival.Process != openloop.ArrivalGamma && m.Arrival.Process != "" {
		d.add(l, "arrival.burstiness", "process: gamma, or remove burstiness", "burstiness applies to process gamma only")
	}
}

// measure decodes measure: what one run measures and when it stops.
func (d *decoder) measure(v *yaml.Node, m *Matrix) {
	m.Measure = Measure{Timeout: 10 * time.Minute, DrainTimeout: time.Minute}
	mm := &m.Measure
	d.object(v, "measure", 1, []field{
		{"warmup_requests", false, func(v *yaml.Node, p string) { mm.WarmupRequests = d.intField(v, p, 0, 1<<31-1) }},
		{"min_completed", true, func(v *yaml.Node, p string) { mm.MinCompleted = d.intField(v, p, 1, 1<<31-1) }},
		{"timeout", false, func(v *yaml.Node, p string) { mm.Timeout = d.positiveDuration(v, p) }},
		{"drain_timeout", false, func(v *yaml.Node, p string) { mm.DrainTimeout = d.duration(v, p) }},
		{"max_error_rate", false, func(v *yaml.Node, p string) {
			if x, ok := d.number(v, p, false); ok {
				if x > 1 {
					d.add(v.Line, p, "a fraction from 0 to 1", "%s is out of range", v.Value)
					return
				}
				mm.MaxErrorRate, mm.MaxErrorRateSet = x, true
			}
		}},
		{"request_timeout", false, func(v *yaml.Node, p string) { mm.RequestTimeout = d.duration(v, p) }},
		{"include_ramp", false, func(v *yaml.Node, p string) { mm.IncludeRamp = d.boolean(v, p) }},
		{"allow_short_outputs", false, func(v *yaml.Node, p string) { mm.AllowShortOutputs = d.boolean(v, p) }},
		{"percentiles", false, func(v *yaml.Node, p string) { mm.Percentiles = d.percentiles(v, p) }},
		{"abort_if", false, func(v *yaml.Node, p string) {
			d.object(v, p, v.Line, []field{
				{"max_inflight", false, func(v *yaml.Node, p string) { mm.AbortIf.MaxInflight = d.intField(v, p, 0, 1<<31-1) }},
				{"max_ttft", false, func(v *yaml.Node, p string) { mm.AbortIf.MaxTTFT = d.duration(v, p) }},
			})
		}},
	})
}

// repeat decodes repeat: the stopping rule over blocks.
func (d *decoder) repeat(v *yaml.Node, m *Matrix) {
	r := &m.Repeat
	*r = Repeat{Min: 3, Metric: results.DefaultStopMetric, RelCI: 0.05, Confidence: 0.95, Randomize: true}
	d.object(v, "repeat", 1, []field{
		{"min", false, func(v *yaml.Node, p string) { r.Min = d.intField(v, p, 1, 10000) }},
		{"max", false, func(v *yaml.Node, p string) { r.Max = d.intField(v, p, 1, 10000) }},
		{"metric", false, func(v *yaml.Node, p string) { r.Metric, _ = d.enum(v, p, results.MatrixNames()...) }},
		{"rel_ci", false, func(v *yaml.Node, p string) { r.RelCI, _ = d.number(v, p, true) }},
		{"confidence", false, func(v *yaml.Node, p string) {
			if r.Confidence, _ = d.number(v, p, true); r.Confidence >= 1 {
				d.add(v.Line, p, "a number between 0 and 1, such as 0.95", "%v is out of range", r.Confidence)
			}
		}},
		{"budget", false, func(v *yaml.Node, p string) { r.Budget = d.duration(v, p) }},
		{"only_unconverged", false, func(v *yaml.Node, p string) { r.OnlyUnconverged = d.boolean(v, p) }},
		{"randomize", false, func(v *yaml.Node, p string) { r.Randomize = d.boolean(v, p) }},
		{"fresh_restart", false, func(v *yaml.Node, p string) { r.FreshRestart = d.boolean(v, p) }},
	})
	if r.Max == 0 {
		r.Max = r.Min
	} else if r.Max < r.Min && r.Min > 0 {
		d.add(d.lines["repeat.max"], "repeat.max", fmt.Sprintf("a value ≥ repeat.min (%d)", r.Min), "max %d is below min", r.Max)
	}
}

// compare decodes compare: the metrics compared against the baseline
// (default results.DefaultCompare).
func (d *decoder) compare(v *yaml.Node, m *Matrix) {
	m.Compare = append([]string(nil), results.DefaultCompare...)
	if v != nil {
		m.Compare = nil
		es, ps, _ := d.list(v, "compare")
		seen := map[string]bool{}
		for i, e := range es {
			if s, ok := d.enum(e, ps[i], results.MatrixNames()...); ok {
				if seen[s] {
					d.add(e.Line, ps[i], "each metric once", "metric %q is listed twice", s)
				}
				seen[s] = true
				m.Compare = append(m.Compare, s)
			}
		}
	}
}

// gate decodes gate: the wait for idle GPUs before each run.
func (d *decoder) gate(v *yaml.Node, m *Matrix) {
	m.Gate = Gate{Enabled: true, TempBandC: 3, Timeout: 5 * time.Minute, MemToleranceMiB: 512}
	g := &m.Gate
	d.object(v, "gate", 1, []field{
		{"enabled", false, func(v *yaml.Node, p string) { g.Enabled = d.boolean(v, p) }},
		{"temp_band_c", false, func(v *yaml.Node, p string) { g.TempBandC, _ = d.number(v, p, true) }},
		{"timeout", false, func(v *yaml.Node, p string) { g.Timeout = d.positiveDuration(v, p) }},
		{"mem_tolerance_mib", false, func(v *yaml.Node, p string) { g.MemToleranceMiB = d.intField(v, p, 0, 1<<31-1) }},
	})
}

// probe decodes probe: sampling during runs.
func (d *decoder) probe(v *yaml.Node, m *Matrix) {
	m.Probe = Probe{Interval: 250 * time.Millisecond, ThrottleMaxFraction: DefaultThrottleMaxFraction}
	d.object(v, "probe", 1, []field{
		{"interval", false, func(v *yaml.Node, p string) { m.Probe.Interval = d.positiveDuration(v, p) }},
		{"path", false, func(v *yaml.Node, p string) {
			if m.Probe.Path, _ = d.str(v, p); m.Probe.Path != "" && !strings.HasPrefix(m.Probe.Path, "/") {
				d.add(v.Line, p, "an HTTP path starting with /, such as /metrics", "invalid path %q", m.Probe.Path)
			}
		}},
		{"throttle_max_fraction", false, func(v *yaml.Node, p string) {
			if f, ok := d.number(v, p, false); ok && f > 1 {
				d.add(v.Line, p, "a fraction from 0 to 1", "%s is out of range", v.Value)
			} else if ok {
				m.Probe.ThrottleMaxFraction = f
			}
		}},
	})
}

// baseline decodes the baseline config (default: the first config).
func (d *decoder) baseline(v *yaml.Node, m *Matrix, configsOK bool) {
	if v == nil {
		if len(m.ConfigOrder) > 0 {
			m.Baseline = m.ConfigOrder[0]
		}
		return
	}
	s, ok := d.str(v, "baseline")
	if !ok || !configsOK {
		return
	}
	if _, ok := m.Configs[s]; !ok {
		d.add(v.Line, "baseline", strings.Join(m.ConfigOrder, ", "), "unknown config %q%s", s, suggest(s, m.ConfigOrder))
		return
	}
	m.Baseline = s
}

// percentiles decodes measure.percentiles: distinct numbers in (0, 100).
func (d *decoder) percentiles(v *yaml.Node, path string) []float64 {
	es, ps, _ := d.list(v, path)
	var out []float64
	for i, e := range es {
		x, ok := d.number(e, ps[i], true)
		switch {
		case !ok:
		case x >= 100:
			d.add(e.Line, ps[i], "a percentile between 0 and 100, such as 99.9", "%s is out of range", e.Value)
		case slices.Contains(out, x):
			d.add(e.Line, ps[i], "distinct percentiles", "%s is listed twice", e.Value)
		default:
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}
