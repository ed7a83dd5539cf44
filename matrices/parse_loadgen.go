package matrices

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mbench/mbench/internal/userfile"
	"github.com/mbench/mbench/openloop"
	"go.yaml.in/yaml/v3"
)

// The load generator's options beyond rates and shapes: the endpoint, the
// closed-loop and ramp arrivals, and dataset shapes. Each enters the cell ids
// and the resolved matrix only when used, so matrices that do not use them
// keep their hashes (and their sweeps stay resumable).

// endpoint decodes endpoint: completions | chat (default completions).
func (d *decoder) endpoint(v *yaml.Node, m *Matrix) {
	m.Endpoint = openloop.EndpointCompletions
	if v == nil {
		return
	}
	names := make([]string, len(openloop.Endpoints))
	for i, e := range openloop.Endpoints {
		names[i] = string(e)
	}
	if s, ok := d.enum(v, "endpoint", names...); ok {
		m.Endpoint = openloop.Endpoint(s)
	}
}

// loadgenSpec adds the load generator's options in use to spec, a cell spec
// or the resolved matrix (whose arrival and measure it extends).
func (m *Matrix) loadgenSpec(spec map[string]any) {
	if m.Endpoint != "" && m.Endpoint != openloop.EndpointCompletions {
		spec["endpoint"] = string(m.Endpoint)
	}
	if r := m.Arrival.Ramp; r != nil {
		spec["arrival"].(map[string]any)["ramp"] = map[string]any{"kind": string(r.Kind), "from": r.From, "duration": r.Duration.String()}
	}
	if m.Measure.IncludeRamp {
		spec["measure"].(map[string]any)["include_ramp"] = true
	}
	if n := m.Arrival.MaxInFlight; n > 0 {
		spec["arrival"].(map[string]any)["max_in_flight"] = n
	}
	if m.Request != nil {
		spec["request"] = m.Request.spec()
	}
}

// ramp decodes arrival.ramp: {kind: linear | exponential, from: r0,
// duration: D}.
func (d *decoder) ramp(v *yaml.Node, path string) *openloop.Ramp {
	r := &openloop.Ramp{}
	kinds := make([]string, len(openloop.RampKinds))
	for i, k := range openloop.RampKinds {
		kinds[i] = string(k)
	}
	d.object(v, path, v.Line, []field{
		{"kind", true, func(v *yaml.Node, p string) {
			k, _ := d.enum(v, p, kinds...)
			r.Kind = openloop.RampKind(k)
		}},
		{"from", true, func(v *yaml.Node, p string) { r.From, _ = d.number(v, p, false) }},
		{"duration", true, func(v *yaml.Node, p string) { r.Duration = d.positiveDuration(v, p) }},
	})
	return r
}

// includeRamp refuses include_ramp without a ramp.
func (d *decoder) includeRamp(m *Matrix) {
	if l := d.lines["measure.include_ramp"]; l > 0 && m.Arrival.Ramp == nil && m.Measure.IncludeRamp {
		d.add(l, "measure.include_ramp", "arrival.ramp, or remove include_ramp", "there is no ramp to include")
	}
}

// arrivalRules holds the arrival, once its keys decoded cleanly, to the load
// generator's own rules, all at once (openloop.Arrival.Problems and
// CheckShape: no ramp or cap in a closed loop, no ramp or closed loop for a
// trace, a ramp's from), each broken rule placed at the line of the field
// its path names.
// A burst's own rules are burst's; a closed loop's levels are checked where
// in_flight is decoded.
func (d *decoder) arrivalRules(m *Matrix) {
	for _, e := range d.errs {
		if strings.HasPrefix(e.Field, "arrival") {
			return
		}
	}
	a := m.Arrival
	switch a.Process {
	case ArrivalBurst:
		a.Process = openloop.ArrivalPoisson
	case openloop.ArrivalConcurrency:
		a.InFlight = 1
	}
	for _, fe := range a.Problems() {
		d.spec(fe, "", "")
	}
	for _, s := range m.Shapes {
		d.spec(a.CheckShape(s), "", "shape "+s.Name+": ")
	}
}

// spec adds err, a rule of the load generator's spec that the matrix breaks,
// at the field its path names under root ("shapes[0]"), on the line of that
// field or of the nearest written one above it; msgPrefix says who broke it.
func (d *decoder) spec(err error, root, msgPrefix string) {
	if err == nil {
		return
	}
	var fe *openloop.FieldError
	if !errors.As(err, &fe) {
		d.add(d.lines[root], root, "", "%s%v", msgPrefix, err)
		return
	}
	field, line := join(root, fe.Path), 0
	for p := field; line == 0 && p != ""; p = p[:max(strings.LastIndex(p, "."), 0)] {
		line = d.lines[p]
	}
	d.add(line, field, fe.Valid, "%s%s", msgPrefix, fe.Msg)
}

// inFlight decodes arrival.in_flight, an in-flight level or a list of
// distinct ones, into m.Rates: in a closed loop the levels take the place
// of rates, one cell per level (as GuideLLM's concurrent rates).
func (d *decoder) inFlight(v *yaml.Node, path string, m *Matrix) {
	if l := d.lines["rates"]; l > 0 {
		d.add(v.Line, path, "in_flight or rates, not both", "a closed loop's in-flight levels replace rates (rates at line %d)", l)
		return
	}
	es, ps := []*yaml.Node{v}, []string{path}
	if v.Kind == yaml.SequenceNode {
		var ok bool
		if es, ps, ok = d.list(v, path); ok && len(es) == 0 {
			d.add(v.Line, path, "an integer ≥ 1 or a list such as [1, 4, 16]", "at least one level is required")
		}
	}
	seen := map[int]int{}
	for i, e := range es {
		n := d.intField(e, ps[i], 1, openloop.MaxInFlight)
		if n < 1 {
			continue
		}
		if first, dup := seen[n]; dup {
			d.add(e.Line, ps[i], "distinct levels", "level %d is listed twice (first at line %d)", n, first)
			continue
		}
		seen[n] = e.Line
		m.Rates = append(m.Rates, float64(n))
	}
}

// ArrivalBurst is the arrival process of an infinite rate (vllm bench
// serve's default --request-rate inf): every measured request of a run is
// due at once, measure.min_completed of them; the matrix has no rates, and
// its cells one each per config and shape, at rate 0.
const ArrivalBurst = "burst"

// burst checks a burst: no rates, no warmup (its requests would be part of
// the burst), no capacity search, no trace or ramp; its cells are at rate 0.
func (d *decoder) burst(nodes map[string]*yaml.Node, m *Matrix) {
	if m.Arrival.Process != ArrivalBurst {
		return
	}
	l := d.lines["arrival.process"]
	for _, c := range []struct {
		key, valid, msg string
	}{
		{"rates", "no rates: a burst sends min_completed requests at once", "a burst has no rate"},
		{"capacity", "a rate-driven process for a capacity search", "a capacity search needs a rate or a closed loop to vary"},
		{"measure.warmup_requests", "no warmup (or a shape's cache_fill, which runs before)", "a burst's warmup requests would go out with its measured ones"},
		{"arrival.ramp", "no ramp: a burst has no rate to ramp", "cannot be combined with a burst"},
	} {
		if cl := d.lines[c.key]; cl > 0 || nodes[c.key] != nil {
			if cl == 0 {
				cl = l
			}
			d.add(cl, c.key, c.valid, "%s", c.msg)
		}
	}
	for _, s := range m.Shapes {
		if s.Trace != nil {
			d.add(l, "arrival.process", "a shape without trace", "shape %s replays a trace's own send times", s.Name)
		}
	}
	m.Rates = []float64{0}
}

// closedLoop checks that process concurrency comes with in_flight, that
// in_flight comes with it, and that any other process has rates.
func (d *decoder) closedLoop(nodes map[string]*yaml.Node, m *Matrix, rootLine int) {
	closed := m.Arrival.Process == openloop.ArrivalConcurrency
	l := d.lines["arrival.in_flight"]
	search := nodes["capacity"] != nil
	switch {
	case closed && search && !capacityOverConcurrency(m):
		d.add(d.lines["arrival.process"], "arrival.process", "a rate-driven process (poisson, gamma, constant), or capacity.over: concurrency", "a capacity search over rates needs an open loop; a closed loop has no rate (search over the requests in flight with capacity.over: concurrency)")
	case !closed && search && capacityOverConcurrency(m):
		d.add(d.lines["capacity.over"], "capacity.over", "arrival: {process: concurrency} (a closed loop) with over: concurrency", "a search over the requests in flight needs a closed loop")
	case closed && search && l > 0:
		d.add(l, "arrival.in_flight", "no in_flight: the search chooses the levels (capacity.lo, capacity.hi)", "a capacity search over concurrency chooses its own in-flight levels")
	case closed && search:
	case closed && l == 0 && d.lines["rates"] == 0:
		d.add(d.lines["arrival.process"], "arrival.in_flight", "an integer ≥ 1 or a list such as [1, 4, 16]", "missing required key (process concurrency)")
	case closed && l == 0:
		d.add(d.lines["rates"], "rates", "arrival.in_flight (the requests kept in flight)", "a closed loop (process concurrency) has no rate; give its in-flight levels as arrival.in_flight")
	case !closed && l > 0:
		d.add(l, "arrival.in_flight", "process: concurrency, or remove in_flight", "in_flight applies to process concurrency only")
	case !closed && !search && nodes["rates"] == nil && m.Arrival.Process != ArrivalBurst:
		d.add(rootLine, "rates", "a list of req/s such as [0.5, 1, 2], or a capacity: section", "missing required key")
	}
}

// dataset decodes a shape's dataset: {path, format}; the path resolves
// against the matrix file (src: as written).
func (d *decoder) dataset(v *yaml.Node, path, file string, src *string) *openloop.Dataset {
	ds := &openloop.Dataset{}
	formats := make([]string, len(openloop.DatasetFormats))
	for i, f := range openloop.DatasetFormats {
		formats[i] = string(f)
	}
	d.object(v, path, v.Line, []field{
		{"path", true, func(v *yaml.Node, p string) {
			*src = d.nonEmpty(v, p)
			ds.Path = besideMatrix(*src, file)
		}},
		{"format", true, func(v *yaml.Node, p string) {
			f, _ := d.enum(v, p, formats...)
			ds.Format = openloop.DatasetFormat(f)
		}},
	})
	return ds
}

// datasetShape checks a dataset shape: name and output only beside it (its
// name defaults to the file's), and, when checkFiles, a file the load
// generator can read, every prompt with an output length unless output is
// set.
func (d *decoder) datasetShape(s *openloop.Shape, src, path string, line int, checkFiles bool) {
	for _, k := range []string{"input", "input_dist", "output_dist", "prefix", "cache_fill", "trace"} {
		if l := d.lines[path+"."+k]; l > 0 {
			d.add(l, path+"."+k, "name and output only beside dataset (the prompts come from the file)", "cannot be combined with dataset")
		}
	}
	ds := s.Dataset
	if s.Name == "" && src != "" {
		base := filepath.Base(src)
		s.Name = strings.TrimSuffix(base, filepath.Ext(base))
		if !nameRE.MatchString(s.Name) {
			d.add(line, path+".name", nameValid, "missing name (the dataset file name %q is not a valid shape name)", base)
		}
	}
	pl := d.lines[path+".dataset.path"]
	if !checkFiles || src == "" || ds.Format == "" {
		return
	}
	if fi, err := os.Stat(ds.Path); err != nil || fi.IsDir() {
		d.add(pl, path+".dataset.path", "a prompt file relative to the matrix file", "cannot read dataset %s", ds.Path)
		return
	}
	// The load generator's own parser: a bad line is refused before
	// anything launches.
	if _, err := openloop.LoadDataset(*ds, s.Output); errors.Is(err, userfile.ErrRefused) {
		d.add(pl, path+".dataset.path", "a prompt file relative to the matrix file", "%v", strings.TrimPrefix(err.Error(), "dataset: "))
	} else if err != nil {
		d.add(pl, path+".dataset.path", "a "+string(ds.Format)+" prompt file (see docs/loadgen.md, Prompts from files)", "bad dataset: %v", err)
	}
}

// tokenIDs decodes engine.token_ids: {min: A, max: B}, the half-open range
// [A, B) of prompt token ids.
func (d *decoder) tokenIDs(v *yaml.Node, path string) openloop.TokenRange {
	var t openloop.TokenRange
	ok := d.object(v, path, v.Line, []field{
		{"min", true, func(v *yaml.Node, p string) { t.Min = d.intField(v, p, 0, 1<<31-2) }},
		{"max", true, func(v *yaml.Node, p string) { t.Max = d.intField(v, p, 1, 1<<31-1) }},
	})
	if ok && t.Max <= t.Min && d.lines[path+".max"] > 0 {
		d.add(d.lines[path+".max"], path+".max", fmt.Sprintf("an id > min (%d); the range is [min, max)", t.Min), "max %d is not above min", t.Max)
	}
	return t
}

// capacityOverConcurrency reports whether the matrix's capacity search
// varies the requests in flight.
func capacityOverConcurrency(m *Matrix) bool { return m.Capacity != nil && m.Capacity.Concurrency() }
