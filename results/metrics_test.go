package results

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/probes"
)

func TestLookup(t *testing.T) {
	for in, want := range map[string]string{
		"ttft_p90": "p90_ttft_ms", "tpot_p99": "p99_tpot_ms", "e2el_p50": "median_e2el_ms", "itl_mean": "mean_itl_ms",
		"ttft_median": "median_ttft_ms", "e2el_std": "std_e2el_ms", "ttft_p99.9": "p99.9_ttft_ms", "itl_p95": "p95_itl_ms",
		"ttft_intended_p90": "p90_ttft_intended_ms",
		"step_duration_p50": "step_duration_us_p50", "build_meta_us_p90": "build_meta_us_p90", "gpu_p50": "gpu_us_p50",
		"p90_ttft_ms": "p90_ttft_ms", "request_throughput": "request_throughput", "gpu_util_mean": "gpu_util_mean",
		// Not names of a latency statistic or a timer: their own keys.
		"ttft_p": "ttft_p", "ttft_p9.": "ttft_p9.", "ttft_p.5": "ttft_p.5", "ttft_pNaN": "ttft_pNaN", "ttft_p1e3": "ttft_p1e3",
		"ttft_q90": "ttft_q90", "schedule_p95": "schedule_p95", "nope_p50": "nope_p50", "": "",
	} {
		if got := Lookup(in); got.Key != want || got.Name != in {
			t.Errorf("Lookup(%q) = %+v, want key %q", in, got, want)
		}
	}
}

// notMetrics are the numeric fields of RunSummary that are not metrics:
// they name the run.
var notMetrics = map[string]bool{"rate": true, "block": true}

// TestRegistryCoversTheSummary holds the registry to RunSummary: every
// numeric field (int, float, *float64) under its JSON name is a declared
// metric with the field's value, or is listed in notMetrics. A field added
// to the summary without a metric, or a metric reading the wrong field,
// fails here.
func TestRegistryCoversTheSummary(t *testing.T) {
	s := &RunSummary{}
	v := reflect.ValueOf(s).Elem()
	want := map[string]float64{}
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		x := float64(i + 1) // distinct per field
		switch {
		case f.Kind() == reflect.Float64:
			f.SetFloat(x)
		case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
			f.SetInt(int64(x))
		case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Float64:
			f.Set(reflect.ValueOf(&x))
		default:
			continue
		}
		if !notMetrics[name] {
			want[name] = x
		}
	}
	got := RunMetrics(s)
	for k, x := range want {
		if got[k] != x {
			t.Errorf("metric %s = %v (present %v), want the field's %v: declare it in the registry (metrics.go) or in notMetrics", k, got[k], hasKey(got, k), x)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("metric %s is not a numeric field of RunSummary", k)
		}
	}
	seen := map[string]bool{}
	for _, m := range registry {
		if seen[m.Key] || Lookup(m.Key).Key != m.Key {
			t.Errorf("registry metric %s: declared twice or not its own key (%v)", m.Key, Lookup(m.Key))
		}
		seen[m.Key] = true
	}
}

func hasKey(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

func TestLatencyStat(t *testing.T) {
	med, p90 := 12.0, 30.0
	s := &RunSummary{MedianTPOTMs: &med, P90TPOTMs: &p90, Percentiles: map[string]float64{"p99.9_tpot_ms": 44}}
	l, ok := LatencyNamed("tpot")
	if !ok || l.Name != TPOT.Name {
		t.Fatalf("LatencyNamed(tpot) = %v, %v", l, ok)
	}
	for p, want := range map[float64]*float64{50: &med, 90: &p90, 99.9: ptr(44), 99: nil, 95: nil, 42: nil} {
		got := l.Stat(s, PercentileStat(p))
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("TPOT p%v = %v, want %v", p, got, want)
		}
	}
	if _, ok := LatencyNamed("ttft_intended"); ok {
		t.Error("LatencyNamed knows ttft_intended, which has no full set of statistics")
	}
}

// TestMetricOf holds MetricOf to Rows: every row of a run, the class,
// instance and GPU families' included, is a metric with the same value,
// unit and direction.
func TestMetricOf(t *testing.T) {
	s := summaryWithEverything(t)
	n, families := 0, 0
	for _, r := range Rows(s) {
		n++
		if strings.HasPrefix(r.Key, "class_") || strings.HasPrefix(r.Key, "inst") || strings.HasPrefix(r.Key, "gpu") && r.Key != GPUUtilMean.Key {
			families++
		}
		m, ok := MetricOf(r.Key)
		if !ok {
			t.Errorf("MetricOf(%s): not a metric", r.Key)
			continue
		}
		if got, ok := m.Value(s); !ok || got != r.Value || m.Unit != r.Unit || m.Better != r.Better || m.Unit == UnitNone && r.Key != KSStat.Key {
			t.Errorf("MetricOf(%s) = %v %v %q %v; its row is %v %q %v", r.Key, got, ok, m.Unit, m.Better, r.Value, r.Unit, r.Better)
		}
	}
	if families < 20 {
		t.Errorf("only %d rows of the class, instance and GPU families: the summary lacks what the test means to cover", families)
	}
	if n < 60 {
		t.Errorf("only %d keys checked: the summary lacks what the test means to cover", n)
	}
	for key, want := range map[string]Metric{"p99.9_itl_ms": {Unit: UnitMs, Better: LowerIsBetter}, "step_duration_us_p50": {Unit: UnitUs, Better: LowerIsBetter},
		"slo_attainment": {Unit: UnitShare, Better: HigherIsBetter}, "request_throughput": {Unit: UnitReqPerS, Better: HigherIsBetter},
		"class_heavy_plus_share": {Unit: UnitShare}, "class_warm_p90_ttft_ms": {Unit: UnitMs, Better: LowerIsBetter},
		"inst12_effective_hit_rate": {Unit: UnitShare, Better: HigherIsBetter}, "gpu3_util_mean": {Unit: UnitPercent}} {
		if m, ok := MetricOf(key); !ok || m.Unit != want.Unit || m.Better != want.Better {
			t.Errorf("MetricOf(%s) = %v %q %v, want %q %v", key, ok, m.Unit, m.Better, want.Unit, want.Better)
		}
	}
	for _, key := range []string{"class_warm_p99_ttft_ms", "class_light_share", "inst_prefix_hit_rate", "gpu_x_util_mean", "inst0_hit_rate", "p99.9_ttft_intended_ms", "nope", "step_duration_us_p95", "pX_ttft_ms"} {
		if _, ok := MetricOf(key); ok {
			t.Errorf("MetricOf(%s) is a metric", key)
		}
	}
}

// summaryWithEverything is a run summary from records, with extra
// percentiles, an SLO, an engine-step log, GPUs, a prefix cache, request
// classes and instances.
func summaryWithEverything(t *testing.T) *RunSummary {
	t.Helper()
	var recs []Record
	for i := range 50 {
		sent := int64(i+1) * 1e8
		recs = append(recs, Record{ID: i, Phase: "measure", Status: "ok", ScheduledNs: sent - 1e5, SentNs: sent, FirstTokenNs: sent + int64(i+5)*1e6,
			LastTokenNs: sent + int64(i+40)*1e6, InputTokens: 100, OutputTokens: 4, ITLMs: []float64{1, 2, float64(i)}})
	}
	s, err := SummarizeRun(RunInput{Cell: "c", Block: 1, Records: recs, Offered: 10, Percentiles: []float64{99.9, 75},
		Start: time.Unix(0, 0), WindowStart: time.Unix(0, 1e8), WindowEnd: time.Unix(6, 0), Policy: Policy{SLO: &SLO{TTFTMs: 30}},
		Steps: &StepStats{NSteps: 7, BatchQueueSteps: 2, Workers: &probes.MergeStats{WorkerLines: 3},
			Timers: map[string]probes.Quantiles{"step_duration_us": {Mean: 1, P50: 2, P90: 3, P99: 4, Min: 0.5, Max: 5}, "gpu_us": {P50: 9}}},
		GPU:   &GPUSummary{Available: true, PerGPU: []probes.GPUStat{{UtilGPU: probes.Stat{Mean: 40}, EnergyJ: 12}}},
		Cache: &CacheSummary{Queries: 10, Hits: 4, HitRate: 0.4, HitRateValid: true}})
	if err != nil {
		t.Fatal(err)
	}
	recs[0].Status, recs[1].InputTokens = "error", 9000
	s.Classes = SummarizeClasses(recs, "", nil, [3]int{})
	s.Instances = &InstanceCaches{Instances: []InstanceCache{{HitRate: ptr(0.3), ExternalHitRate: ptr(0.1), EffectiveHitRate: ptr(0.4)}, {HitRate: ptr(0.5)}}}
	return s
}

// TestLookupAsTheRegexDid holds Lookup to the two patterns it replaced
// (kept here as the reference) over every combination of the names'
// parts: the same key for every name, but ttft_intended_<stat>, which the
// patterns left unresolved.
func TestLookupAsTheRegexDid(t *testing.T) {
	latencyAlias := regexp.MustCompile(`^(ttft|tpot|itl|e2el)_(mean|median|std|p50|p[0-9]+(?:\.[0-9]+)?)$`)
	timerAlias := regexp.MustCompile(`^([a-z_]+?)(_us)?_(mean|p50|p90|p99|min|max)$`)
	stepTimers := map[string]bool{"step_duration": true, "schedule": true, "build_meta": true, "execute": true,
		"update": true, "get_finished": true, "launch": true, "wait": true, "unaccounted": true, "gpu": true}
	old := func(name string) string {
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
	heads := []string{"ttft", "tpot", "itl", "e2el", "ttft_intended", "step_duration", "step_duration_us", "gpu", "gpu_us", "wait",
		"unaccounted_us", "request_throughput", "p90_ttft", "class_warm", "x", ""}
	stats := []string{"mean", "median", "std", "p50", "p90", "p95", "p99", "p99.9", "p007", "p9.", "p.5", "p", "min", "max", "q90", "p1e3", "us_p50", "p50_ms"}
	n := 0
	for _, h := range heads {
		for _, st := range stats {
			for _, name := range []string{h + "_" + st, h + st, st} {
				got, want := Lookup(name).Key, old(name)
				if strings.HasPrefix(name, "ttft_intended_") && got != want {
					continue // newly resolved
				}
				n++
				if got != want {
					t.Errorf("Lookup(%q) = %q, the patterns gave %q", name, got, want)
				}
			}
		}
	}
	if n < 500 {
		t.Errorf("only %d names compared", n)
	}
}
