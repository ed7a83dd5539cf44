package matrices

import (
	"fmt"
	"slices"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"go.yaml.in/yaml/v3"
)

// Capacity turns a sweep into a capacity search (the matrix's capacity:
// section): for each config and shape, the highest offered rate at which
// Metric stays at or below MaxMs, bracketed between rates that hold and
// rates that do not, each probed rate run once in every one of Blocks
// blocks. The matrix then has no rates: the search chooses them.
// The json names are those of the resolved matrix (spec), which sweep.json
// records and a resumed or exported sweep reads back.
type Capacity struct {
	Metric string  `json:"metric,omitempty"` // a latency metric in ms (ttft_p90, e2el_p99, …)
	MaxMs  float64 `json:"max_ms,omitempty"` // the SLO: Metric ≤ MaxMs
	// Constraints replace Metric and MaxMs with several bounds every probe
	// must meet at once (capacity_constraints.go); Bounds gives either.
	Constraints []results.Bound `json:"constraints,omitempty"`
	// Over is what the search varies: the offered rate (OverRate, the
	// default; "" in sweeps recorded before it) or the requests kept in
	// flight (OverConcurrency, a closed loop), whose levels Lo, Hi and the
	// probes then are.
	Over      string  `json:"over,omitempty"`
	Lo        float64 `json:"lo"`         // the first two rates probed (req/s; multipliers for trace shapes)
	Hi        float64 `json:"hi"`         // (see Lo)
	Tolerance float64 `json:"tolerance"`  // stop when the bracket's upper end is within (1+Tolerance)× its lower (default 0.05)
	Blocks    int     `json:"blocks"`     // runs per probed rate, one per block (default 3, at least 2: a CI needs two)
	MaxProbes int     `json:"max_probes"` // probed rates per config and shape at most (default 12)
	Expand    int     `json:"expand"`     // doublings above hi (halvings below lo) the search may try (default 4)
	// Retries is how often a probe's block that gave no usable run (a run
	// failed, errored, client-limited…: it says nothing about the SLO) is
	// run again before the planner goes on without it (default 2).
	Retries int `json:"retries"`
}

// Capacity defaults.
const (
	DefaultCapacityTolerance = 0.05
	DefaultCapacityBlocks    = 3
	DefaultCapacityMaxProbes = 12
	DefaultCapacityExpand    = 4
	DefaultCapacityRetries   = 2
)

// CapacityMetrics lists the metrics a capacity search can hold to a limit
// in milliseconds: the latency statistics of results.MatrixNames.
func CapacityMetrics() []string {
	return slices.DeleteFunc(results.MatrixNames(), func(m string) bool { _, _, _, ok := results.LatencyStat(m); return !ok })
}

// capacity decodes the capacity section and enforces that a matrix has
// either rates (a fixed-rate sweep) or capacity (a search), not both, and
// that repeat's block settings (which capacity.blocks replaces) are absent.
func (d *decoder) capacity(nodes map[string]*yaml.Node, m *Matrix) {
	v := nodes["capacity"]
	if v == nil {
		return // rates are then required (closedLoop, parse_loadgen.go)
	}
	c := &Capacity{Tolerance: DefaultCapacityTolerance, Blocks: DefaultCapacityBlocks,
		MaxProbes: DefaultCapacityMaxProbes, Expand: DefaultCapacityExpand, Retries: DefaultCapacityRetries}
	n := len(d.errs)
	d.object(v, "capacity", v.Line, []field{
		{"metric", false, func(v *yaml.Node, p string) { c.Metric, _ = d.enum(v, p, CapacityMetrics()...) }},
		{"max_ms", false, func(v *yaml.Node, p string) { c.MaxMs, _ = d.number(v, p, true) }},
		{"constraints", false, func(v *yaml.Node, p string) { c.Constraints = d.constraints(v, p) }},
		{"over", false, func(v *yaml.Node, p string) { c.Over, _ = d.enum(v, p, OverRate, OverConcurrency) }},
		{"lo", true, func(v *yaml.Node, p string) { c.Lo, _ = d.number(v, p, true) }},
		{"hi", true, func(v *yaml.Node, p string) { c.Hi, _ = d.number(v, p, true) }},
		{"tolerance", false, func(v *yaml.Node, p string) {
			if c.Tolerance, _ = d.number(v, p, true); c.Tolerance > 1 {
				d.add(v.Line, p, "a fraction > 0 and ≤ 1, such as 0.05", "%s is out of range", v.Value)
			}
		}},
		{"blocks", false, func(v *yaml.Node, p string) { c.Blocks = d.intField(v, p, 2, 1000) }},
		{"max_probes", false, func(v *yaml.Node, p string) { c.MaxProbes = d.intField(v, p, 2, 1000) }},
		{"expand", false, func(v *yaml.Node, p string) { c.Expand = d.intField(v, p, 0, 20) }},
		{"retries", false, func(v *yaml.Node, p string) { c.Retries = d.intField(v, p, 0, 10) }},
	})
	single, list := d.lines["capacity.metric"] > 0 || d.lines["capacity.max_ms"] > 0, d.lines["capacity.constraints"] > 0
	switch {
	case single && list:
		d.add(d.lines["capacity.constraints"], "capacity.constraints", "metric and max_ms (one bound) or constraints (several), not both", "both forms given")
	case !single && !list:
		d.add(v.Line, "capacity.metric", "metric and max_ms, such as {metric: ttft_p90, max_ms: 500}, or constraints", "missing required key")
	case single && (c.Metric == "") != (c.MaxMs == 0):
		d.add(v.Line, "capacity.max_ms", "metric and max_ms together", "missing required key")
	}
	if c.Over == OverConcurrency {
		for _, k := range []string{"lo", "hi"} {
			if x := map[string]float64{"lo": c.Lo, "hi": c.Hi}[k]; x > 0 && x != float64(int(x)) {
				d.add(d.lines["capacity."+k], "capacity."+k, "an in-flight level (a whole number ≥ 1)", "%v is not a whole number", x)
			}
		}
	}
	if c.Lo > 0 && c.Hi > 0 && c.Hi <= c.Lo {
		d.add(d.lines["capacity.hi"], "capacity.hi", fmt.Sprintf("a rate above lo (%v)", c.Lo), "hi %v is not above lo", c.Hi)
	}
	if r := nodes["rates"]; r != nil {
		d.add(r.Line, "rates", "rates (a fixed-rate sweep) or capacity (a search over rates), not both",
			"a capacity search chooses its own rates; remove rates, or remove capacity for a fixed-rate sweep")
	}
	for _, k := range []string{"min", "max", "rel_ci", "budget", "only_unconverged"} {
		if l := d.lines["repeat."+k]; l > 0 {
			d.add(l, "repeat."+k, "capacity.blocks (the blocks of a capacity search); repeat.confidence and repeat.randomize still apply",
				"does not apply to a capacity search")
		}
	}
	if len(d.errs) == n {
		m.Capacity = c
	}
}

// capacitySpec is the resolved capacity section (part of the matrix hash):
// a single bound as metric and max_ms, several as constraints; over only
// for a search over concurrency.
func (c *Capacity) spec() map[string]any {
	s := map[string]any{"lo": c.Lo, "hi": c.Hi,
		"tolerance": c.Tolerance, "blocks": c.Blocks, "max_probes": c.MaxProbes, "expand": c.Expand, "retries": c.Retries}
	if len(c.Constraints) > 0 {
		s["constraints"] = c.Constraints
	} else {
		s["metric"], s["max_ms"] = c.Metric, c.MaxMs
	}
	if c.Over == OverConcurrency {
		s["over"] = c.Over
	}
	return s
}

// Bounds are the constraints every probe is held to: Constraints, or the
// one of Metric and MaxMs.
func (c *Capacity) Bounds() []results.Bound {
	if len(c.Constraints) > 0 {
		return c.Constraints
	}
	x := c.MaxMs
	return []results.Bound{{Metric: c.Metric, MaxMs: &x}}
}

// Concurrency reports whether the search varies the requests in flight.
func (c *Capacity) Concurrency() bool { return c.Over == OverConcurrency }

// CapacityCell is the cell a capacity search probes: config at rate with
// shape, with the id a fixed-rate sweep would give the same cell. An
// attempt > 0 re-runs the blocks of that probe that gave no usable run: a
// cell of its own (the id salted with the attempt), the same config, rate
// and shape.
func (m *Matrix) CapacityCell(config string, rate float64, shape openloop.Shape, attempt int) (Cell, error) {
	if _, ok := m.Configs[config]; !ok {
		return Cell{}, fmt.Errorf("capacity cell: unknown config %q", config)
	}
	c := m.cell(config, rate, shape)
	if attempt > 0 {
		c.ID = mustHash(map[string]any{"cell": c.ID, "attempt": attempt}, 12)
		c.Attempt = attempt
	}
	return c, nil
}
