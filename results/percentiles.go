package results

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/stats"
)

// Every summary reports the median, p90, p95 and p99 of TTFT, TPOT, ITL and
// E2EL (vllm bench serve reports p99 unless --metric-percentiles chooses
// others); a run may ask for more (mbench load --percentiles, the matrix's
// measure.percentiles), which summary_A.json keeps under percentiles, keyed
// as vLLM keys them: p<p>_<metric>_ms ("p99.9_ttft_ms").

// DefaultPercentiles are the percentiles every summary has.
var DefaultPercentiles = []float64{50, 90, 95, 99}

// PercentileKey is vLLM's result key of percentile p of metric (ttft,
// tpot, itl, e2el): "p95_ttft_ms", "p99.9_ttft_ms".
func PercentileKey(p float64, metric string) string {
	return Latency{Name: metric}.Key("p" + strconv.FormatFloat(p, 'f', -1, 64))
}

// ParsePercentiles reads a comma-separated list of percentiles such as
// "50,90,95,99,99.9" (vllm bench serve's --metric-percentiles), each in
// (0, 100), without duplicates; it returns them sorted.
func ParsePercentiles(list string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(list, ",") {
		p, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(p > 0 && p < 100) {
			return nil, fmt.Errorf("percentile %q: want a number between 0 and 100 (exclusive), such as 95 or 99.9", strings.TrimSpace(f))
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("percentile %v listed twice", p)
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// fillPercentiles sets, for each percentile of extra beyond
// DefaultPercentiles, its entry of s.Percentiles from the sorted
// per-request values of each latency of Latencies (by name).
func fillPercentiles(s *RunSummary, extra []float64, byName map[string][]float64) {
	for _, l := range Latencies {
		xs := byName[l.Name]
		if len(xs) == 0 {
			continue
		}
		for _, p := range extra {
			if slices.Contains(DefaultPercentiles, p) {
				continue
			}
			if s.Percentiles == nil {
				s.Percentiles = map[string]float64{}
			}
			s.Percentiles[PercentileKey(p, l.Name)] = stats.PercentileSorted(xs, p)
		}
	}
}

// LengthStats is the distribution of the output tokens of a run's completed
// measured requests: with natural lengths (ignore_eos off) the engine's,
// else the max_tokens every request asked for.
type LengthStats struct {
	N      int      `json:"n"`
	Mean   *float64 `json:"mean"`
	Median *float64 `json:"median"`
	P90    *float64 `json:"p90"`
	P99    *float64 `json:"p99"`
	Min    int      `json:"min"`
	Max    int      `json:"max"`
}

// outputLengths is the distribution of the output tokens of the completed
// measured requests; nil without one.
func outputLengths(recs []openloop.Record) *LengthStats {
	var xs []float64
	for i := range recs {
		if r := &recs[i]; r.Phase == openloop.PhaseMeasure && r.OK() {
			xs = append(xs, float64(r.OutputTokens))
		}
	}
	if len(xs) == 0 {
		return nil
	}
	sort.Float64s(xs)
	return &LengthStats{N: len(xs), Mean: ptr(stats.Mean(xs)), Median: ptr(stats.PercentileSorted(xs, 50)),
		P90: ptr(stats.PercentileSorted(xs, 90)), P99: ptr(stats.PercentileSorted(xs, 99)),
		Min: int(xs[0]), Max: int(math.Round(xs[len(xs)-1]))}
}
