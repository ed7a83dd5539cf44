package matrices

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Constraint is one bound a capacity search holds every probe to: a
// latency metric at or below MaxMs (ttft_p90, tpot_p99, e2el_p99.9, …), or
// a rate or share at or above Min (request_goodput and output_throughput
// in their units, slo_attainment as a fraction).
type Constraint struct {
	Metric string   `json:"metric"`
	MaxMs  *float64 `json:"max_ms,omitempty"`
	Min    *float64 `json:"min,omitempty"`
}

// String is the bound in words: "ttft_p90 ≤ 500 ms", "slo_attainment ≥ 0.9".
func (c Constraint) String() string {
	if c.MaxMs != nil {
		return fmt.Sprintf("%s ≤ %g ms", c.Metric, *c.MaxMs)
	}
	return fmt.Sprintf("%s ≥ %g", c.Metric, *c.Min)
}

// The variables a capacity search can search over (capacity.over).
const (
	OverRate        = "rate"        // the offered request rate (req/s), an open loop
	OverConcurrency = "concurrency" // the requests kept in flight, a closed loop
)

// capacityLatencyRE matches the latency metrics a constraint bounds above:
// the four request latencies at their mean, median or any percentile.
var capacityLatencyRE = regexp.MustCompile(`^(ttft|tpot|itl|e2el)_(mean|median|p50|p([0-9]+(?:\.[0-9]+)?))$`)

// capacityMinMetrics are the metrics a constraint bounds below, with what
// the bound is.
var capacityMinMetrics = map[string]string{
	"request_goodput":    "req/s of requests that met the slo section",
	"slo_attainment":     "the share of requests that met the slo section, 0 to 1",
	"request_throughput": "completed req/s",
	"output_throughput":  "output tokens/s",
}

// constraints decodes capacity.constraints: a list of {metric, max_ms} or
// {metric, min}.
func (d *decoder) constraints(v *yaml.Node, path string) []Constraint {
	es, ps, ok := d.list(v, path)
	if ok && len(es) == 0 {
		d.add(v.Line, path, "a list such as [{metric: ttft_p90, max_ms: 500}, {metric: slo_attainment, min: 0.9}]", "at least one constraint is required")
	}
	var out []Constraint
	seen := map[string]int{}
	for i, e := range es {
		var c Constraint
		d.object(e, ps[i], e.Line, []field{
			{"metric", true, func(v *yaml.Node, p string) { c.Metric, _ = d.str(v, p) }},
			{"max_ms", false, func(v *yaml.Node, p string) {
				if x, ok := d.number(v, p, true); ok {
					c.MaxMs = &x
				}
			}},
			{"min", false, func(v *yaml.Node, p string) {
				if x, ok := d.number(v, p, true); ok {
					c.Min = &x
				}
			}},
		})
		if c.Metric == "" {
			continue
		}
		if first, dup := seen[c.Metric]; dup {
			d.add(e.Line, ps[i], "each metric once", "metric %s is bounded twice (first at line %d)", c.Metric, first)
			continue
		}
		seen[c.Metric] = e.Line
		if msg, valid := checkConstraint(c); msg != "" {
			d.add(e.Line, ps[i], valid, "%s", msg)
			continue
		}
		out = append(out, c)
	}
	return out
}

// checkConstraint says what is wrong with c, and what would be valid.
func checkConstraint(c Constraint) (msg, valid string) {
	const valid0 = "a latency metric (ttft, tpot, itl, e2el × mean, median or pNN) with max_ms, or request_goodput, slo_attainment, request_throughput or output_throughput with min"
	_, minMetric := capacityMinMetrics[c.Metric]
	switch {
	case capacityLatencyRE.MatchString(c.Metric) && c.MaxMs == nil:
		return fmt.Sprintf("%s is a latency: give max_ms", c.Metric), valid0
	case capacityLatencyRE.MatchString(c.Metric) && c.Min != nil:
		return fmt.Sprintf("%s is a latency, bounded above: max_ms, not min", c.Metric), valid0
	case minMetric && c.Min == nil:
		return fmt.Sprintf("%s (%s) is bounded below: give min", c.Metric, capacityMinMetrics[c.Metric]), valid0
	case minMetric && c.MaxMs != nil:
		return fmt.Sprintf("%s is bounded below: min, not max_ms", c.Metric), valid0
	case c.Metric == "slo_attainment" && *c.Min > 1:
		return fmt.Sprintf("slo_attainment min %g: a share is at most 1", *c.Min), "a share such as 0.9"
	case !minMetric && !capacityLatencyRE.MatchString(c.Metric):
		return fmt.Sprintf("unknown metric %q", c.Metric), valid0
	}
	if m := capacityLatencyRE.FindStringSubmatch(c.Metric); m != nil && m[3] != "" {
		if p, _ := strconv.ParseFloat(m[3], 64); !(p > 0 && p < 100) {
			return fmt.Sprintf("%s: percentile %s is out of range", c.Metric, m[3]), "a percentile between 0 and 100, such as p99.9"
		}
	}
	return "", ""
}

// checkConstraints checks the constraints against the rest of the matrix:
// goodput and attainment need the slo section; a percentile beyond p50,
// p90, p95 and p99 needs measure.percentiles to report it.
func (d *decoder) checkConstraints(c *Capacity, m *Matrix) {
	line := d.lines["capacity.constraints"]
	if line == 0 {
		line = d.lines["capacity"]
	}
	for _, k := range c.Constraints {
		switch mm := capacityLatencyRE.FindStringSubmatch(k.Metric); {
		case (k.Metric == "request_goodput" || k.Metric == "slo_attainment") && m.SLO == nil:
			d.add(line, "capacity.constraints", "an slo section (slo: {ttft_ms: …}) that goodput and attainment count against", "%s needs the slo section", k.Metric)
		case mm != nil && mm[3] != "":
			p, _ := strconv.ParseFloat(mm[3], 64)
			if !slices.Contains([]float64{50, 90, 95, 99}, p) && !slices.Contains(m.Measure.Percentiles, p) {
				d.add(line, "capacity.constraints", fmt.Sprintf("measure.percentiles: [%s] so that every run reports it", mm[3]),
					"%s: the runs report p50, p90, p95 and p99; add %s to measure.percentiles", k.Metric, mm[3])
			}
		}
	}
}

// ConstraintsText is the constraints in words, joined with commas.
func (c *Capacity) ConstraintsText() string {
	bs := c.Bounds()
	parts := make([]string, len(bs))
	for i, k := range bs {
		parts[i] = k.String()
	}
	return strings.Join(parts, ", ")
}
