package results

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mbench/mbench/probes"
)

// The metric registry: every figure a run is compared, tabled and stopped
// on is declared here once — its key (the name summary_A.json, tables.csv,
// the comparisons and the reports use), its unit, which direction is
// better, and where a run's summary keeps it. The latencies are declared
// with their definition over a request record (Latency). Readers take
// metrics by key (RunMetrics, Metric.Value) or by the name a matrix gives
// (Lookup); none knows a summary's struct fields.

// DefaultCompare are the metrics compared with the baseline when a sweep
// names none.
var DefaultCompare = []string{"ttft_p90", "tpot_p90", "e2el_p90", "step_duration_p50"}

// BlockMetrics are the figures report.md lists per block beside the
// primary metric: the client's median time per output token and the
// engine's median step time.
var BlockMetrics = []string{"tpot_p50", "step_duration_p50"}

// DefaultStopMetric is the metric of the stopping rule and of the
// noise-floor table when a sweep names none.
const DefaultStopMetric = "ttft_p90"

// Unit is the unit of a metric's values.
type Unit string

// Units.
const (
	UnitMs      Unit = "ms"
	UnitUs      Unit = "us"
	UnitSeconds Unit = "s"
	UnitReqPerS Unit = "req/s"
	UnitTokPerS Unit = "tok/s"
	UnitMsPerS  Unit = "ms/s"
	UnitCount   Unit = "count"  // requests, steps, lines
	UnitTokens  Unit = "tokens" // tokens in all
	UnitShare   Unit = "share"  // a fraction in [0, 1]
	UnitPercent Unit = "%"
	UnitJoules  Unit = "J"
	UnitP       Unit = "p" // a test's p-value
	UnitNone    Unit = ""  // a test statistic
)

// Direction says which way a metric is better.
type Direction int8

// Directions.
const (
	Neutral        Direction = iota // neither: a count of the load, a test's p-value
	LowerIsBetter                   // latencies, failures, lag
	HigherIsBetter                  // throughput, attainment, hit rates
)

// Metric is one declared metric of a run.
type Metric struct {
	Key    string
	Unit   Unit
	Better Direction
	value  func(*RunSummary) (float64, bool)
}

// Value is m's value in run s; false when s does not have it.
func (m Metric) Value(s *RunSummary) (float64, bool) {
	if s == nil || m.value == nil {
		return 0, false
	}
	return m.value(s)
}

// Latency is a per-request latency: its name in the metric keys (ttft) and
// its definition over one request record, the values (ms) the record
// gives; openloop.Record defines each (vLLM's definitions, to the chunk).
type Latency struct {
	Name string
	of   func(*Record, []float64) []float64
}

// one adapts a record's single latency to Latency.of.
func one(f func(*Record) (float64, bool)) func(*Record, []float64) []float64 {
	return func(r *Record, xs []float64) []float64 {
		if v, ok := f(r); ok {
			return append(xs, v)
		}
		return xs
	}
}

// The latencies. ITL is every inter-token gap of a request, pooled.
var (
	TTFT         = Latency{"ttft", one((*Record).TTFTMs)}
	TPOT         = Latency{"tpot", one((*Record).TPOTMs)}
	ITL          = Latency{"itl", func(r *Record, xs []float64) []float64 { return append(xs, r.ITLMs...) }}
	E2EL         = Latency{"e2el", one((*Record).E2ELMs)}
	TTFTIntended = Latency{"ttft_intended", one((*Record).TTFTIntendedMs)}
	// Latencies are the latencies with the full set of statistics
	// (LatencyStats) and the extra percentiles.
	Latencies = []Latency{TTFT, TPOT, ITL, E2EL}
)

// LatencyNamed is the latency of Latencies named name (ttft, tpot, itl,
// e2el).
func LatencyNamed(name string) (Latency, bool) {
	i := slices.IndexFunc(Latencies, func(l Latency) bool { return l.Name == name })
	if i < 0 {
		return Latency{}, false
	}
	return Latencies[i], true
}

// Stat is statistic stat of l in run s: one of LatencyStats, or p<p> of
// the run's extra percentiles ("p99.9"); nil when s does not have it.
func (l Latency) Stat(s *RunSummary, stat string) *float64 {
	if f := l.fields(s)[stat]; f != nil {
		return *f
	}
	if v, ok := s.Percentiles[l.Key(stat)]; ok {
		return &v
	}
	return nil
}

// PercentileStat is the statistic of percentile p: "median" for 50, else
// p<p> ("p90", "p99.9").
func PercentileStat(p float64) string {
	if p == 50 {
		return StatMedian
	}
	return "p" + strconv.FormatFloat(p, 'f', -1, 64)
}

// Append appends r's values of l to xs.
func (l Latency) Append(xs []float64, r *Record) []float64 { return l.of(r, xs) }

// The statistics of a latency a summary keeps.
const (
	StatMean   = "mean"
	StatMedian = "median"
	StatStd    = "std"
	StatP90    = "p90"
	StatP95    = "p95"
	StatP99    = "p99"
)

// LatencyStats are the statistics every latency of Latencies has.
var LatencyStats = []string{StatMean, StatMedian, StatStd, StatP90, StatP95, StatP99}

// Key is the metric key of statistic stat of l, as vLLM keys its results:
// "p90_ttft_ms", "median_e2el_ms", "p99.9_ttft_ms".
func (l Latency) Key(stat string) string { return stat + "_" + l.Name + "_ms" }

// The metrics of fixed key. request_goodput is `vllm bench serve
// --goodput`'s name for the rate of good requests.
var (
	NumPrompts           = value("num_prompts", UnitCount, Neutral, func(s *RunSummary) int { return s.NumPrompts })
	Completed            = value("completed", UnitCount, HigherIsBetter, func(s *RunSummary) int { return s.Completed })
	Failed               = value("failed", UnitCount, LowerIsBetter, func(s *RunSummary) int { return s.Failed })
	Duration             = value("duration", UnitSeconds, Neutral, func(s *RunSummary) float64 { return s.Duration })
	RequestThroughput    = value("request_throughput", UnitReqPerS, HigherIsBetter, func(s *RunSummary) float64 { return s.RequestThroughput })
	OutputThroughput     = value("output_throughput", UnitTokPerS, HigherIsBetter, func(s *RunSummary) float64 { return s.OutputThroughput })
	TotalInputTokens     = value("total_input_tokens", UnitTokens, Neutral, func(s *RunSummary) int64 { return s.TotalInputTokens })
	TotalOutputTokens    = value("total_output_tokens", UnitTokens, Neutral, func(s *RunSummary) int64 { return s.TotalOutputTokens })
	OfferedRate          = value("offered_rate", UnitReqPerS, Neutral, func(s *RunSummary) float64 { return s.OfferedRate })
	OfferedRealized      = opt("offered_rate_realized", UnitReqPerS, Neutral, func(s *RunSummary) *float64 { return s.OfferedRealized })
	AchievedRate         = opt("achieved_rate", UnitReqPerS, Neutral, func(s *RunSummary) *float64 { return s.AchievedRate })
	SentRate             = opt("sent_rate", UnitReqPerS, Neutral, func(s *RunSummary) *float64 { return s.SentRate })
	ThrRatio             = opt("thr_ratio", UnitShare, HigherIsBetter, func(s *RunSummary) *float64 { return s.ThrRatio })
	TTFTDrift            = opt("ttft_drift_ms", UnitMs, LowerIsBetter, func(s *RunSummary) *float64 { return s.TTFTDriftMs })
	CutWaiting           = value("cut_waiting", UnitCount, LowerIsBetter, func(s *RunSummary) int { return s.CutWaiting })
	CutStreaming         = value("cut_streaming", UnitCount, LowerIsBetter, func(s *RunSummary) int { return s.CutStreaming })
	TTFTSlope            = opt("ttft_slope_ms_per_s", UnitMsPerS, LowerIsBetter, func(s *RunSummary) *float64 { return s.TTFTSlopeMsPerS })
	TTFTSlopeP           = opt("ttft_slope_p", UnitP, Neutral, func(s *RunSummary) *float64 { return s.TTFTSlopeP })
	SendLagP50           = opt("send_lag_p50_ms", UnitMs, LowerIsBetter, func(s *RunSummary) *float64 { return s.SendLagP50Ms })
	SendLagP99           = opt("send_lag_p99_ms", UnitMs, LowerIsBetter, func(s *RunSummary) *float64 { return s.SendLagP99Ms })
	SendLagMax           = opt("send_lag_max_ms", UnitMs, LowerIsBetter, func(s *RunSummary) *float64 { return s.SendLagMaxMs })
	AchievedSendRatio    = opt("achieved_send_ratio", UnitShare, HigherIsBetter, func(s *RunSummary) *float64 { return s.AchievedSendRatio })
	KSStat               = opt("ks_stat", UnitNone, LowerIsBetter, func(s *RunSummary) *float64 { return s.KSStat })
	KSP                  = opt("ks_p", UnitP, Neutral, func(s *RunSummary) *float64 { return s.KSP })
	ClientCPU            = value("client_cpu_pct", UnitPercent, LowerIsBetter, func(s *RunSummary) float64 { return s.ClientCPUPct })
	UsageMissing         = value("usage_missing_requests", UnitCount, LowerIsBetter, func(s *RunSummary) int { return s.UsageMissing })
	ShortOutputs         = value("short_output_requests", UnitCount, LowerIsBetter, func(s *RunSummary) int { return s.ShortOutputs })
	ShortOutputMeanShare = opt("short_output_mean_share", UnitShare, HigherIsBetter, func(s *RunSummary) *float64 { return s.ShortOutputMeanShare })
	Goodput              = opt("request_goodput", UnitReqPerS, HigherIsBetter, func(s *RunSummary) *float64 { return s.Goodput })
	SLOAttainment        = opt("slo_attainment", UnitShare, HigherIsBetter, func(s *RunSummary) *float64 { return s.SLOAttainment })
	GPUUtilMean          = Metric{"gpu_util_mean", UnitPercent, Neutral, func(s *RunSummary) (float64, bool) { return gpuUtilMean(s.GPU) }}
	GPUEnergy            = Metric{"gpu_energy_j", UnitJoules, LowerIsBetter, gpuEnergy}
	PrefixCacheHitRate   = Metric{"prefix_cache_hit_rate", UnitShare, HigherIsBetter, func(s *RunSummary) (float64, bool) { return cacheHitRate(s.PrefixCache) }}
	// The engine's step log (engine_step.jsonl), beside its timers
	// (StepTimerKey).
	NSteps          = step("n_steps", func(st *StepStats) int64 { return st.NSteps })
	BatchQueueSteps = step("batch_queue_steps", func(st *StepStats) int64 { return st.BatchQueueSteps })
	WorkerLines     = worker("worker_lines", func(w *probes.MergeStats) int64 { return w.WorkerLines })
	WorkerUnmatched = worker("worker_unmatched", func(w *probes.MergeStats) int64 { return w.WorkerUnmatched })
)

// The keys of the SLO's metrics.
var (
	MetricGoodput       = Goodput.Key
	MetricSLOAttainment = SLOAttainment.Key
)

// registry is every metric a run summary keeps at a fixed key, in
// declaration order; RunMetrics adds the families whose keys a run
// names (extra percentiles, step timers, classes, instances, GPUs).
var registry = func() []Metric {
	ms := []Metric{NumPrompts, Completed, Failed, Duration, RequestThroughput, OutputThroughput, TotalInputTokens, TotalOutputTokens}
	for _, l := range summarized {
		for _, stat := range LatencyStats {
			if l.fields(new(RunSummary))[stat] != nil {
				ms = append(ms, opt(l.Key(stat), UnitMs, LowerIsBetter, func(s *RunSummary) *float64 { return *l.fields(s)[stat] }))
			}
		}
	}
	ms = append(ms, OfferedRate, OfferedRealized, AchievedRate, SentRate, ThrRatio, TTFTDrift, CutWaiting, CutStreaming,
		TTFTSlope, TTFTSlopeP, SendLagP50, SendLagP99, SendLagMax, AchievedSendRatio, KSStat, KSP, ClientCPU,
		UsageMissing, ShortOutputs, ShortOutputMeanShare, Goodput, SLOAttainment, GPUUtilMean, GPUEnergy, PrefixCacheHitRate,
		NSteps, BatchQueueSteps, WorkerLines, WorkerUnmatched)
	return append(ms, InstanceAggregates...)
}()

// The declarations of a metric by how the summary keeps it: a number it
// always has (value), one it may not have (opt), …
func value[T int | int64 | float64](key string, u Unit, d Direction, f func(*RunSummary) T) Metric {
	return Metric{key, u, d, func(s *RunSummary) (float64, bool) { return float64(f(s)), true }}
}

func opt(key string, u Unit, d Direction, f func(*RunSummary) *float64) Metric {
	return Metric{key, u, d, func(s *RunSummary) (float64, bool) {
		if p := f(s); p != nil {
			return *p, true
		}
		return 0, false
	}}
}

func step(key string, f func(*StepStats) int64) Metric {
	return Metric{key, UnitCount, Neutral, func(s *RunSummary) (float64, bool) {
		if s.EngineStep == nil {
			return 0, false
		}
		return float64(f(s.EngineStep)), true
	}}
}

func worker(key string, f func(*probes.MergeStats) int64) Metric {
	return Metric{key, UnitCount, Neutral, func(s *RunSummary) (float64, bool) {
		if s.EngineStep == nil || s.EngineStep.Workers == nil {
			return 0, false
		}
		return float64(f(s.EngineStep.Workers)), true
	}}
}

// gpuEnergy is the energy of the run's GPUs, where their utilisation is known.
func gpuEnergy(s *RunSummary) (float64, bool) {
	if _, ok := gpuUtilMean(s.GPU); !ok {
		return 0, false
	}
	var e float64
	for _, g := range s.GPU.PerGPU {
		e += g.EnergyJ
	}
	return e, true
}

// Row is one figure of a run: the key it goes by (the name summary_A.json,
// tables.csv and the comparisons use), its unit, which way is better, and
// its value. Values carry their name and unit, so a reader of rows knows
// no field of a summary.
type Row struct {
	Key    string
	Unit   Unit
	Better Direction
	Value  float64
}

// Rows are every figure of run s, in a fixed order: the registry's (those
// the run has), the extra latency percentiles it asked for
// (p99.9_ttft_ms), each statistic of its engine-step timers
// (<timer>_<stat>: step_duration_us_p50, …), then its class, per-instance
// and per-GPU figures (classRows, instanceRows).
func Rows(s *RunSummary) []Row {
	if s == nil {
		return nil
	}
	var out []Row
	for _, m := range registry {
		if v, ok := m.value(s); ok {
			out = append(out, Row{m.Key, m.Unit, m.Better, v})
		}
	}
	put := func(key string, v float64) {
		u, d, _ := familyOf(key)
		out = append(out, Row{key, u, d, v})
	}
	for _, k := range slices.Sorted(maps.Keys(s.Percentiles)) {
		put(k, s.Percentiles[k])
	}
	if st := s.EngineStep; st != nil {
		for _, timer := range slices.Sorted(maps.Keys(st.Timers)) {
			for _, stat := range timerStats {
				put(StepTimerKey(timer, stat), timerStat(st.Timers[timer], stat))
			}
		}
	}
	opt := func(key string, v *float64) {
		if v != nil && !math.IsNaN(*v) {
			put(key, *v)
		}
	}
	classRows(s, opt)
	instanceRows(s, opt)
	return out
}

// RunMetrics is Rows(s) by key.
func RunMetrics(s *RunSummary) map[string]float64 {
	out := map[string]float64{}
	for _, r := range Rows(s) {
		out[r.Key] = r.Value
	}
	return out
}

// StepTimerKey is the metric key of statistic stat (mean, p50, p90, p99,
// min, max) of an engine-step timer (probes.TimerNames: step_duration_us):
// "step_duration_us_p50".
func StepTimerKey(timer, stat string) string { return timer + "_" + stat }

// timerStats are the statistics of each engine-step timer (probes.Quantiles).
var timerStats = []string{"mean", "p50", "p90", "p99", "min", "max"}

// timerStat is one statistic of a timer.
func timerStat(q probes.Quantiles, stat string) float64 {
	switch stat {
	case "mean":
		return q.Mean
	case "p50":
		return q.P50
	case "p90":
		return q.P90
	case "p99":
		return q.P99
	case "min":
		return q.Min
	}
	return q.Max
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
		n := s.Completed + s.engineFailed()
		return float64(n), n > 0
	case strings.HasPrefix(key, "class_") && strings.HasSuffix(key, "_"+ClassShare):
		return float64(s.Completed), s.Completed > 0
	case key == PrefixCacheHitRate.Key:
		if s.PrefixCache == nil || !(s.PrefixCache.Queries > 0) {
			return 0, false
		}
		return s.PrefixCache.Queries, true
	}
	return 0, false
}
