package matrices

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mbench/mbench/results"
	"go.yaml.in/yaml/v3"
)

// The variables a capacity search can search over (capacity.over).
const (
	OverRate        = "rate"        // the offered request rate (req/s), an open loop
	OverConcurrency = "concurrency" // the requests kept in flight, a closed loop
)

// constraints decodes capacity.constraints: a list of {metric, max_ms} or
// {metric, min}.
func (d *decoder) constraints(v *yaml.Node, path string) []results.Bound {
	es, ps, ok := d.list(v, path)
	if ok && len(es) == 0 {
		d.add(v.Line, path, "a list such as [{metric: ttft_p90, max_ms: 500}, {metric: slo_attainment, min: 0.9}]", "at least one constraint is required")
	}
	var out []results.Bound
	seen := map[string]int{}
	for i, e := range es {
		var c results.Bound
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
func checkConstraint(c results.Bound) (msg, valid string) {
	_, _, pct, latency := results.LatencyStat(c.Metric)
	means, minMetric := results.BoundedBelowMeans(c.Metric)
	switch {
	case latency && c.MaxMs == nil:
		return fmt.Sprintf("%s is a latency: give max_ms", c.Metric), validConstraint()
	case latency && c.Min != nil:
		return fmt.Sprintf("%s is a latency, bounded above: max_ms, not min", c.Metric), validConstraint()
	case minMetric && c.Min == nil:
		return fmt.Sprintf("%s (%s) is bounded below: give min", c.Metric, means), validConstraint()
	case minMetric && c.MaxMs != nil:
		return fmt.Sprintf("%s is bounded below: min, not max_ms", c.Metric), validConstraint()
	case c.Metric == results.MetricSLOAttainment && *c.Min > 1:
		return fmt.Sprintf("%s min %g: a share is at most 1", c.Metric, *c.Min), "a share such as 0.9"
	case !minMetric && !latency:
		return fmt.Sprintf("unknown metric %q", c.Metric), validConstraint()
	}
	if pct != "" {
		if p, _ := strconv.ParseFloat(pct, 64); !(p > 0 && p < 100) {
			return fmt.Sprintf("%s: percentile %s is out of range", c.Metric, pct), "a percentile between 0 and 100, such as p99.9"
		}
	}
	return "", ""
}

// validConstraint says what a constraint may bound, from the registry:
// "a latency metric (ttft, tpot, itl, e2el × mean, median or pNN) with
// max_ms, or request_goodput, … or output_throughput with min".
func validConstraint() string {
	var lat, below []string
	for _, l := range results.Latencies {
		lat = append(lat, l.Name)
	}
	for _, b := range results.BoundedBelow {
		below = append(below, b.Key)
	}
	last := len(below) - 1
	return fmt.Sprintf("a latency metric (%s × mean, median or pNN) with max_ms, or %s or %s with min",
		strings.Join(lat, ", "), strings.Join(below[:last], ", "), below[last])
}

// checkConstraints checks the constraints against the rest of the matrix:
// goodput and attainment need the slo section; a percentile beyond p50,
// p90, p95 and p99 needs measure.percentiles to report it.
func (d *decoder) checkConstraints(c *Capacity, m *Matrix) {
	line := cmp.Or(d.lines["capacity.constraints"], d.lines["capacity"])
	for _, k := range c.Constraints {
		_, _, pct, _ := results.LatencyStat(k.Metric)
		switch {
		case (k.Metric == results.MetricGoodput || k.Metric == results.MetricSLOAttainment) && m.SLO == nil:
			d.add(line, "capacity.constraints", "an slo section (slo: {ttft_ms: …}) that goodput and attainment count against", "%s needs the slo section", k.Metric)
		case pct != "":
			p, _ := strconv.ParseFloat(pct, 64)
			if !slices.Contains([]float64{50, 90, 95, 99}, p) && !slices.Contains(m.Measure.Percentiles, p) {
				d.add(line, "capacity.constraints", fmt.Sprintf("measure.percentiles: [%s] so that every run reports it", pct),
					"%s: the runs report p50, p90, p95 and p99; add %s to measure.percentiles", k.Metric, pct)
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
