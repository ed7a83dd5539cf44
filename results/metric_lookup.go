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
