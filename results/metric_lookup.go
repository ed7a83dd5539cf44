package results

import (
	"slices"
	"strconv"
	"strings"

	"github.com/mbench/mbench/probes"
)

// Finding metrics by name: a key to its declared metric (MetricOf), a name
// as a matrix writes it to its key (Lookup), a run's value of either
// (RunMetric). The names come from the declarations in metrics.go and
// probes.TimerNames; nothing here is a pattern.

// MetricOf is the metric of key: a declared one, any statistic of a
// latency of Latencies ("p99.9_ttft_ms"), or a statistic of an engine-step
// timer ("step_duration_us_p50"). false for any other key, such as those
// of the class, instance and GPU families.
func MetricOf(key string) (Metric, bool) {
	for _, m := range registry {
		if m.Key == key {
			return m, true
		}
	}
	for _, l := range Latencies {
		if stat, ok := strings.CutSuffix(key, "_"+l.Name+"_ms"); ok && isPercentile(stat) {
			return Metric{key, UnitMs, LowerIsBetter, func(s *RunSummary) (float64, bool) {
				if v := l.Stat(s, stat); v != nil {
					return *v, true
				}
				return 0, false
			}}, true
		}
	}
	for _, timer := range probes.TimerNames {
		if stat, ok := strings.CutPrefix(key, timer+"_"); ok && slices.Contains(timerStats, stat) {
			return Metric{key, UnitUs, LowerIsBetter, func(s *RunSummary) (float64, bool) {
				if s.EngineStep == nil {
					return 0, false
				}
				q, ok := s.EngineStep.Timers[timer]
				return timerStat(q, stat), ok
			}}, true
		}
	}
	return Metric{}, false
}

// Named is a metric as a matrix or a user names it (ttft_p90) with its
// key in the registry (p90_ttft_ms).
type Named struct{ Name, Key string }

// Lookup resolves a metric name as users write it in a matrix to its key:
// a latency statistic as <latency>_<stat> ("ttft_p90" → "p90_ttft_ms",
// "ttft_p50"/"ttft_median" → "median_ttft_ms", "ttft_p99.9" →
// "p99.9_ttft_ms"), an engine-step timer without its unit
// ("step_duration_p50" → "step_duration_us_p50"). A key, and a name it
// does not know, is its own key.
func Lookup(name string) Named {
	return Named{name, lookupKey(name)}
}

func lookupKey(name string) string {
	for _, l := range append(append([]Latency(nil), Latencies...), TTFTIntended) {
		stat, ok := strings.CutPrefix(name, l.Name+"_")
		if !ok {
			continue
		}
		switch {
		case stat == StatMean || stat == StatMedian || stat == StatStd:
			return l.Key(stat)
		case stat == "p50":
			return l.Key(StatMedian)
		case isPercentile(stat):
			return l.Key(stat)
		}
	}
	for _, timer := range probes.TimerNames {
		base := strings.TrimSuffix(timer, "_us")
		stat, ok := strings.CutPrefix(name, base+"_")
		if !ok {
			stat, ok = strings.CutPrefix(name, timer+"_")
		}
		if ok && slices.Contains(timerStats, stat) {
			return StepTimerKey(timer, stat)
		}
	}
	return name
}

// isPercentile reports whether stat is p<digits>[.<digits>].
func isPercentile(stat string) bool {
	num, ok := strings.CutPrefix(stat, "p")
	if !ok || num == "" || strings.Trim(num, "0123456789.") != "" || strings.Count(num, ".") > 1 ||
		num[0] == '.' || num[len(num)-1] == '.' {
		return false
	}
	_, err := strconv.ParseFloat(num, 64)
	return err == nil
}

// RunMetric returns one metric of a run by user name (see Lookup).
func RunMetric(s *RunSummary, name string) (float64, bool) {
	key := Lookup(name).Key
	if m, ok := MetricOf(key); ok {
		return m.Value(s)
	}
	v, ok := RunMetrics(s)[key]
	return v, ok
}

// matrixTimers are the engine-step timers a matrix may name, with the
// statistics it may take of each.
var matrixTimers = []struct {
	timer string
	stats []string
}{{"step_duration_us", []string{"p50", "p90", "p99"}}, {"build_meta_us", []string{"p50", "p90"}}}

// MatrixNames are the metric names a matrix may compare and repeat on, in
// the order its errors list them: each latency of Latencies at its mean,
// p50, p90, p95 and p99, the engine-step timers of matrixTimers without
// their unit, and the output and request throughput.
func MatrixNames() []string {
	var out []string
	for _, l := range Latencies {
		for _, s := range []string{StatMean, "p50", StatP90, StatP95, StatP99} {
			out = append(out, l.Name+"_"+s)
		}
	}
	for _, t := range matrixTimers {
		for _, s := range t.stats {
			out = append(out, strings.TrimSuffix(t.timer, "_us")+"_"+s)
		}
	}
	return append(out, OutputThroughput.Key, RequestThroughput.Key)
}

// LatencyStat splits a name as a matrix writes a latency statistic
// (ttft_p90, e2el_p99.9, tpot_mean, itl_median) into its latency and
// statistic. pct is the percentile's number beyond p50 ("90", "99.9"),
// empty for the mean, the median and p50. false when name is no such
// statistic of a latency of Latencies.
func LatencyStat(name string) (l Latency, stat, pct string, ok bool) {
	for _, l := range Latencies {
		stat, found := strings.CutPrefix(name, l.Name+"_")
		switch {
		case !found:
		case stat == StatMean || stat == StatMedian || stat == "p50":
			return l, stat, "", true
		case isPercentile(stat):
			return l, stat, stat[1:], true
		}
	}
	return Latency{}, "", "", false
}
