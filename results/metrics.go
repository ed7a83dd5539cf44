package results

import (
	"reflect"
	"regexp"
	"strings"
)

// DefaultCompare are the metrics compared with the baseline when a sweep
// names none.
var DefaultCompare = []string{"ttft_p90", "tpot_p90", "e2el_p90", "step_duration_p50"}

// DefaultStopMetric is the metric of the stopping rule and of the
// noise-floor table when a sweep names none.
const DefaultStopMetric = "ttft_p90"

// identityFields are numeric summary fields that name a run rather than
// measure it.
var identityFields = map[string]bool{"rate": true, "block": true}

// RunMetrics flattens a run summary into metric name → value: every numeric
// top-level field under its JSON name (completed, p90_ttft_ms, thr_ratio, …;
// null ones are left out), every engine-step timer statistic as
// <timer>_<stat> (step_duration_us_p50, build_meta_us_p90, …) plus n_steps,
// and gpu_util_mean, gpu_energy_j, prefix_cache_hit_rate where present.
func RunMetrics(s *RunSummary) map[string]float64 {
	out := map[string]float64{}
	if s == nil {
		return out
	}
	v := reflect.ValueOf(s).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" || identityFields[name] {
			continue
		}
		f := v.Field(i)
		if f.Kind() == reflect.Pointer {
			if f.IsNil() || f.Elem().Kind() != reflect.Float64 {
				continue
			}
			f = f.Elem()
		}
		switch f.Kind() {
		case reflect.Float64:
			out[name] = f.Float()
		case reflect.Int, reflect.Int64:
			out[name] = float64(f.Int())
		}
	}
	for k, v := range s.Percentiles {
		out[k] = v
	}
	if st := s.EngineStep; st != nil {
		out["n_steps"] = float64(st.NSteps)
		out["batch_queue_steps"] = float64(st.BatchQueueSteps)
		if w := st.Workers; w != nil {
			out["worker_lines"] = float64(w.WorkerLines)
			out["worker_unmatched"] = float64(w.WorkerUnmatched)
		}
		for timer, q := range st.Timers {
			for stat, x := range map[string]float64{"mean": q.Mean, "p50": q.P50, "p90": q.P90, "p99": q.P99, "min": q.Min, "max": q.Max} {
				out[timer+"_"+stat] = x
			}
		}
	}
	if u, ok := gpuUtilMean(s.GPU); ok {
		out["gpu_util_mean"] = u
		var e float64
		for _, g := range s.GPU.PerGPU {
			e += g.EnergyJ
		}
		out["gpu_energy_j"] = e
	}
	if h, ok := cacheHitRate(s.PrefixCache); ok {
		out["prefix_cache_hit_rate"] = h
	}
	addClassMetrics(s, out)
	return out
}

var (
	latencyAlias = regexp.MustCompile(`^(ttft|tpot|itl|e2el)_(mean|median|std|p50|p[0-9]+(?:\.[0-9]+)?)$`)
	timerAlias   = regexp.MustCompile(`^([a-z_]+?)(_us)?_(mean|p50|p90|p99|min|max)$`)
)

// stepTimers are the timers of engine_step.jsonl, without the _us suffix.
var stepTimers = map[string]bool{
	"step_duration": true, "schedule": true, "build_meta": true, "execute": true,
	"update": true, "get_finished": true, "launch": true, "wait": true, "unaccounted": true, "gpu": true,
}

// ResolveMetric maps a metric name as users write it in a matrix to the key
// RunMetrics uses: "ttft_p90" → "p90_ttft_ms", "ttft_p50"/"ttft_median" →
// "median_ttft_ms", "step_duration_p50" → "step_duration_us_p50". Names that
// are already keys, and names it does not recognise, come back unchanged.
func ResolveMetric(name string) string {
	if m := latencyAlias.FindStringSubmatch(name); m != nil {
		stat := m[2]
		if stat == "p50" {
			stat = "median"
		}
		return stat + "_" + m[1] + "_ms"
	}
	if m := timerAlias.FindStringSubmatch(name); m != nil && stepTimers[m[1]] {
		return m[1] + "_us_" + m[3]
	}
	return name
}

// RunMetric returns one metric of a run by user name (see ResolveMetric).
func RunMetric(s *RunSummary, name string) (float64, bool) {
	v, ok := RunMetrics(s)[ResolveMetric(name)]
	return v, ok
}

// proportionTrials is the number of trials behind a run's proportion metric
// key: the requests slo_attainment divides by (completed + failed by the
// engine), the completed requests a class's share is of, the prompt tokens
// the prefix cache was queried for. false for any other metric.
func proportionTrials(s *RunSummary, key string) (float64, bool) {
	if s == nil {
		return 0, false
	}
	switch {
	case key == MetricSLOAttainment:
		n := s.Completed
		for class, k := range s.Errors {
			if !harnessCut(class) {
				n += k
			}
		}
		return float64(n), n > 0
	case strings.HasPrefix(key, "class_") && strings.HasSuffix(key, "_share"):
		return float64(s.Completed), s.Completed > 0
	case key == "prefix_cache_hit_rate":
		if s.PrefixCache == nil || !(s.PrefixCache.Queries > 0) {
			return 0, false
		}
		return s.PrefixCache.Queries, true
	}
	return 0, false
}
