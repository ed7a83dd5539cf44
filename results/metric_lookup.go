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

// MetricOf is the metric of key: a declared one, or one of the families
// a run names (familyOf), whose value is its row's. false for any other
// key.
func MetricOf(key string) (Metric, bool) {
	if i := slices.IndexFunc(registry, func(m Metric) bool { return m.Key == key }); i >= 0 {
		return registry[i], true
	}
	u, d, ok := familyOf(key)
	if !ok {
		return Metric{}, false
	}
	return Metric{key, u, d, func(s *RunSummary) (float64, bool) {
		v, ok := RunMetrics(s)[key]
		return v, ok
	}}, true
}

// familyOf is the unit and direction of a key of the families whose keys
// a run names: any statistic of a latency of Latencies ("p99.9_ttft_ms"),
// of an engine-step timer ("step_duration_us_p50"), a class's figure
// ("class_heavy_share", "class_warm_p90_ttft_ms"), an instance's
// ("inst0_prefix_hit_rate") and a GPU's utilization ("gpu0_util_mean").
func familyOf(key string) (Unit, Direction, bool) {
	for _, l := range Latencies {
		if stat, ok := strings.CutSuffix(key, "_"+l.Name+"_ms"); ok && isPercentile(stat) {
			return UnitMs, LowerIsBetter, true
		}
	}
	for _, timer := range probes.TimerNames {
		if stat, ok := strings.CutPrefix(key, timer+"_"); ok && slices.Contains(timerStats, stat) {
			return UnitUs, LowerIsBetter, true
		}
	}
	for _, n := range ClassNames { // class_heavy_ is a prefix of class_heavy_plus_: try on
		what, ok := strings.CutPrefix(key, ClassMetric(n, ""))
		switch f, known := classFigures[what]; {
		case ok && known:
			return f.Unit, f.Better, true
		case ok && slices.Contains(classLatencies, what):
			return UnitMs, LowerIsBetter, true
		}
	}
	if rest, ok := strings.CutPrefix(key, "inst"); ok {
		if k, what, ok := strings.Cut(rest, "_"); ok && isIndex(k) && slices.Contains(instanceFigures, what) {
			return UnitShare, HigherIsBetter, true
		}
	}
	if rest, ok := strings.CutPrefix(key, "gpu"); ok {
		if k, ok := strings.CutSuffix(rest, "_util_mean"); ok && isIndex(k) {
			return UnitPercent, Neutral, true
		}
	}
	return "", Neutral, false
}

// isIndex reports whether k is a number of an instance or GPU (0, 1, …).
func isIndex(k string) bool {
	_, err := strconv.ParseUint(k, 10, 32)
	return err == nil
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
	for _, l := range summarized {
		stat, ok := strings.CutPrefix(name, l.Name+"_")
		if !ok {
			continue
		}
		if stat == "p50" {
			stat = StatMedian
		}
		if stat == StatMean || stat == StatMedian || stat == StatStd || isPercentile(stat) {
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
	m, _ := MetricOf(Lookup(name).Key)
	return m.Value(s)
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
