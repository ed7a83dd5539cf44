package matrices

import (
	"strings"
	"testing"
)

// TestConstraintErrors: each wrong constraint is refused at its line and
// path in the user's terms, saying what would be valid; a good one passes.
func TestConstraintErrors(t *testing.T) {
	const valid = "valid: a latency metric (ttft, tpot, itl, e2el × mean, median or pNN) with max_ms, or request_goodput, slo_attainment, request_throughput or output_throughput with min"
	for _, tc := range []struct{ constraint, want string }{
		{"{metric: ttft_p90, min: 3}", "x.yaml:7: capacity.constraints[0]: ttft_p90 is a latency: give max_ms; " + valid},
		{"{metric: e2el_mean, max_ms: 9, min: 3}", "x.yaml:7: capacity.constraints[0]: e2el_mean is a latency, bounded above: max_ms, not min; " + valid},
		{"{metric: request_goodput, max_ms: 3}", "x.yaml:7: capacity.constraints[0]: request_goodput (req/s of requests that met the slo section) is bounded below: give min; " + valid},
		{"{metric: output_throughput, max_ms: 3, min: 2}", "x.yaml:7: capacity.constraints[0]: output_throughput is bounded below: min, not max_ms; " + valid},
		{"{metric: slo_attainment, min: 2}", "x.yaml:7: capacity.constraints[0]: slo_attainment min 2: a share is at most 1; valid: a share such as 0.9"},
		{"{metric: ttft_p97x, max_ms: 3}", "x.yaml:7: capacity.constraints[0]: unknown metric \"ttft_p97x\"; " + valid},
		{"{metric: itl_std, max_ms: 3}", "x.yaml:7: capacity.constraints[0]: unknown metric \"itl_std\"; " + valid},
		{"{metric: tpot_p100, max_ms: 3}", "x.yaml:7: capacity.constraints[0]: tpot_p100: percentile 100 is out of range; valid: a percentile between 0 and 100, such as p99.9"},
		{"{metric: ttft_p99.9, max_ms: 3}", "x.yaml:7: capacity.constraints: ttft_p99.9: the runs report p50, p90, p95 and p99; add 99.9 to measure.percentiles; valid: measure.percentiles: [99.9] so that every run reports it"},
		{"{metric: slo_attainment, min: 0.9}", "x.yaml:7: capacity.constraints: slo_attainment needs the slo section"},
	} {
		_, err := Parse("x.yaml", []byte(capacityBase+"capacity: {lo: 1, hi: 8, constraints: ["+tc.constraint+"]}\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error\n%v\nwant it to contain\n%s", tc.constraint, err, tc.want)
		}
	}
	for _, ok := range []string{"{metric: ttft_median, max_ms: 3}", "{metric: tpot_p50, max_ms: 3}", "{metric: e2el_p95, max_ms: 3}", "{metric: request_throughput, min: 1}"} {
		if _, err := Parse("x.yaml", []byte(capacityBase+"capacity: {lo: 1, hi: 8, constraints: ["+ok+"]}\n")); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
