package results

import (
	"cmp"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/mbench/mbench/stats"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
)

// Thresholds of the run self-grading (docs/design.md, "Run self-grading").
const (
	// SaturationThrRatio: a run whose thr_ratio is below it is saturated.
	SaturationThrRatio = 0.9
	// SaturationMinOffered: thr_ratio grades a run only when at least this
	// many requests were offered in its window.
	SaturationMinOffered = 10
	// TrendAlpha: the TTFT slope test must reject "no rise" at this level...
	TrendAlpha = 0.01
	// TrendMinRise: ...and the fitted rise over the window must exceed this
	// fraction of the median TTFT, for a run to count as saturated by trend.
	TrendMinRise = 0.5
	// TrendMinRiseMs: ...and by at least this many ms: a rise below the
	// load generator's own send precision (openloop.ClientLateMs) is the
	// host's noise, not a queue (TTFTs of a fraction of a millisecond on a
	// loaded host rise by "half the median" on scheduling alone).
	TrendMinRiseMs = openloop.ClientLateMs
)

// The thresholds of client_limited are the load generator's own
// (openloop.ClientLateMs and the constants beside it): the summary copies its
// grading.

// RunInput is everything SummarizeRun needs about one run: who it was, the
// request records (all phases; only "measure" counts), the window, and the
// probe summaries, which are copied into the summary as they are.
type RunInput struct {
	Cell, Config, Shape string
	Rate                float64 // the cell's nominal rate (req/s)
	Block               int
	Engine              string // e.g. "vllm 0.11.0" or "sim"
	Simulated           bool
	Arrival             string  // poisson (the default when empty), gamma, constant, trace
	Burstiness          float64 // gamma shape k of a gamma arrival process

	Records                       []Record
	Start, WindowStart, WindowEnd time.Time // Start is t=0 of the records' *_ns
	Offered                       float64   // offered rate (req/s)
	Aborted                       bool
	AbortReason                   string
	AbortCause                    openloop.AbortCause
	// StopReason is why sending stopped (openloop.Result.StopReason:
	// min_completed, requests, duration, timeout, trace_end, aborted,
	// canceled); "" when not known.
	StopReason   string
	ClientCPUPct float64
	// HostCPU is the load generator's machine during the run
	// (openloop.Result.HostBusyPct, HostStealPct); nil when not known.
	HostCPU *HostCPU
	// Grade is the load generator's self-grading of the run
	// (openloop.Result.Grade). When nil, SummarizeRun computes it with
	// openloop.SelfGrade(Records, Offered, {Arrival, Burstiness}), the
	// function openloop.Run uses, so both agree as long as Arrival and
	// Burstiness are the run's; passing Grade needs neither.
	Grade *openloop.Grade

	// Policy is what the run is held to (min_completed, max_error_rate).
	Policy Policy
	// Percentiles are percentiles to report beyond DefaultPercentiles;
	// NaturalLength says the requests let the engine end at end-of-sequence;
	// Label and Metadata are copied into the summary.
	Percentiles   []float64
	NaturalLength bool
	Label         string
	Metadata      map[string]string

	Steps *StepStats
	GPU   *GPUSummary
	Cache *CacheSummary
	Gate  *GateRecord
	// Contention is what shared the run's CPUs; nil when not read.
	Contention *probes.Contention
}

// WithLoad fills in what the load generator measured: the records, the
// window, the offered rate, the abort and the self-grading of res. It is the
// one mapping from openloop.Result to a summary's input.
func (in RunInput) WithLoad(res *openloop.Result) RunInput {
	in.Records, in.Start, in.WindowStart, in.WindowEnd = res.Records, res.Start, res.WindowStart, res.WindowEnd
	in.Offered, in.Aborted, in.AbortReason, in.AbortCause, in.ClientCPUPct = res.Offered, res.Aborted, res.AbortReason, res.AbortCause, res.ClientCPUPct
	in.StopReason = res.StopReason
	in.Grade = &res.Grade
	if res.HostCPUKnown {
		in.HostCPU = &HostCPU{BusyPct: res.HostBusyPct, StealPct: res.HostStealPct, ClientPct: res.ClientCPUPct}
	}
	return in
}

// RunSummary is the per-run summary_A.json. Field names follow
// `vllm bench serve`; latency statistics are in milliseconds and are null
// when there were no samples (never a made-up 0).
type RunSummary struct {
	Simulated bool    `json:"simulated"`
	Engine    string  `json:"engine,omitempty"`
	Cell      string  `json:"cell"`
	Config    string  `json:"config"`
	Shape     string  `json:"shape"`
	Rate      float64 `json:"rate"`
	Block     int     `json:"block"`
	Arrival   string  `json:"arrival,omitempty"`

	NumPrompts        int     `json:"num_prompts"`
	Completed         int     `json:"completed"`
	Failed            int     `json:"failed"`
	Duration          float64 `json:"duration"`
	RequestThroughput float64 `json:"request_throughput"`
	OutputThroughput  float64 `json:"output_throughput"`
	TotalInputTokens  int64   `json:"total_input_tokens"`
	TotalOutputTokens int64   `json:"total_output_tokens"`

	MeanTTFTMs   *float64 `json:"mean_ttft_ms"`
	MedianTTFTMs *float64 `json:"median_ttft_ms"`
	StdTTFTMs    *float64 `json:"std_ttft_ms"`
	P90TTFTMs    *float64 `json:"p90_ttft_ms"`
	P99TTFTMs    *float64 `json:"p99_ttft_ms"`
	MeanTPOTMs   *float64 `json:"mean_tpot_ms"`
	MedianTPOTMs *float64 `json:"median_tpot_ms"`
	StdTPOTMs    *float64 `json:"std_tpot_ms"`
	P90TPOTMs    *float64 `json:"p90_tpot_ms"`
	P99TPOTMs    *float64 `json:"p99_tpot_ms"`
	MeanITLMs    *float64 `json:"mean_itl_ms"`
	MedianITLMs  *float64 `json:"median_itl_ms"`
	StdITLMs     *float64 `json:"std_itl_ms"`
	P90ITLMs     *float64 `json:"p90_itl_ms"`
	P99ITLMs     *float64 `json:"p99_itl_ms"`
	MeanE2ELMs   *float64 `json:"mean_e2el_ms"`
	MedianE2ELMs *float64 `json:"median_e2el_ms"`
	StdE2ELMs    *float64 `json:"std_e2el_ms"`
	P90E2ELMs    *float64 `json:"p90_e2el_ms"`
	P99E2ELMs    *float64 `json:"p99_e2el_ms"`

	// P90/P99TTFTIntendedMs measure TTFT from the scheduled send time, so a
	// load generator that fell behind cannot hide queueing (coordinated
	// omission).
	P90TTFTIntendedMs *float64 `json:"p90_ttft_intended_ms"`
	P99TTFTIntendedMs *float64 `json:"p99_ttft_intended_ms"`

	OfferedRate float64 `json:"offered_rate"`
	// OfferedRealized is the rate the arrival schedule actually offered in
	// this run, (n−1)/(last − first scheduled send): a Poisson sample of
	// 200 requests is ±7% off its nominal rate.
	OfferedRealized *float64 `json:"offered_rate_realized"`
	AchievedRate    *float64 `json:"achieved_rate"`
	// SentRate is the measured requests written within the schedule's
	// window over that window, beside achieved_rate's acknowledged ones.
	SentRate *float64 `json:"sent_rate"`
	// ThrRatio is the share of the measured requests, all sent in the
	// measured window, that the engine saw through: completed / (completed
	// + requests still waiting for their first token when the harness cut
	// them off at the drain timeout or the stop). A request the engine
	// failed counts in neither (it is an error), nor does one cut off while
	// it streamed (the engine was serving it: CutStreaming); one that
	// completed after the last send counts as completed, so a long output
	// is not load left undone.
	ThrRatio         *float64 `json:"thr_ratio"`
	Saturated        bool     `json:"saturated"`
	SaturationReason string   `json:"saturation_reason,omitempty"`
	// TTFTDriftMs is the rise of TTFT through the window (the fitted
	// slope × the window) when it passed the saturation trend test but the
	// engine's own queue stayed empty: the engine slowed down (contention,
	// clocks, its own per-token time rising), which is not saturation.
	// DriftReason says so in words. Absent when there was no such rise.
	TTFTDriftMs *float64 `json:"ttft_drift_ms,omitempty"`
	DriftReason string   `json:"drift_reason,omitempty"`
	Aborted     bool     `json:"aborted"`
	AbortReason string   `json:"abort_reason,omitempty"`
	// AbortCause is why the run was aborted (overload, failures, harness).
	AbortCause openloop.AbortCause `json:"abort_cause,omitempty"`
	// CutWaiting and CutStreaming count the measured requests the harness
	// cut off (drained at the drain timeout, or cancelled by a stop) before
	// their first token and while they streamed.
	CutWaiting   int `json:"cut_waiting"`
	CutStreaming int `json:"cut_streaming"`
	// StopReason is why sending stopped (RunInput.StopReason).
	StopReason      string   `json:"stop_reason,omitempty"`
	TTFTSlopeMsPerS *float64 `json:"ttft_slope_ms_per_s"`
	TTFTSlopeP      *float64 `json:"ttft_slope_p"`

	// The load generator's self-grading (openloop.Grade): send lag = sent −
	// scheduled; achieved_send_ratio = the achieved send rate over the
	// scheduled rate of the same requests; the KS test of the sent gaps
	// against the offered gap law on a 0.1 ms grid (null when it does not
	// apply: constant arrivals, trace replay, fewer than 20 sends).
	SendLagP50Ms      *float64 `json:"send_lag_p50_ms"`
	SendLagP99Ms      *float64 `json:"send_lag_p99_ms"`
	SendLagMaxMs      *float64 `json:"send_lag_max_ms"`
	AchievedSendRatio *float64 `json:"achieved_send_ratio"`
	KSStat            *float64 `json:"ks_stat"`
	KSP               *float64 `json:"ks_p"`
	ClientCPUPct      float64  `json:"client_cpu_pct"`
	// HostCPU is the CPU of the machine mbench ran on during the run:
	// contention the load generator shared its cores with; absent when
	// the OS did not say.
	HostCPU *HostCPU `json:"host_cpu,omitempty"`
	// Contention is what shared the run's CPUs: mbench's scheduling
	// delay, other work on the load generator's cores (and whether it
	// shared busy cores: a mark, not a verdict) and each engine host's
	// process-tree, busy and stolen CPU.
	Contention          *probes.Contention `json:"contention,omitempty"`
	ClientLimited       bool               `json:"client_limited"`
	ClientLimitedReason string             `json:"client_limited_reason,omitempty"`

	WindowStart string `json:"window_start,omitempty"` // RFC 3339, UTC
	WindowEnd   string `json:"window_end,omitempty"`

	// Verdict is the run's verdict (Decide); VerdictReasons every condition
	// that applied, the verdict's first.
	Verdict        Verdict  `json:"verdict"`
	VerdictReasons []string `json:"verdict_reasons,omitempty"`

	// Errors counts the failed measured requests by openloop.ErrorClass;
	// ErrorExamples keeps the first error text of each class.
	Errors        map[string]int    `json:"errors"`
	ErrorExamples map[string]string `json:"error_examples,omitempty"`
	// UsageMissing counts the completed measured requests whose stream had
	// no usage chunk (their output tokens are content chunks, an undercount
	// where a chunk carries several tokens); ShortOutputs those whose usage
	// reports fewer tokens than the max_tokens = min_tokens asked for (the
	// engine stopped early), ShortOutputExample the first of them in words,
	// ShortOutputMeanShare their mean share of the tokens asked for and
	// ShortOutputFinish their finish reasons counted ("none" when the
	// stream gave none). Missing usage marks the run; short outputs make
	// it short_outputs unless the matrix allows them (Decide).
	UsageMissing         int            `json:"usage_missing_requests"`
	ShortOutputs         int            `json:"short_output_requests"`
	ShortOutputExample   string         `json:"short_output_example,omitempty"`
	ShortOutputMeanShare *float64       `json:"short_output_mean_share,omitempty"`
	ShortOutputFinish    map[string]int `json:"short_output_finish_reasons,omitempty"`
	EngineStep           *StepStats     `json:"engine_step,omitempty"`
	GPU                  *GPUSummary    `json:"gpu,omitempty"`
	PrefixCache          *CacheSummary  `json:"prefix_cache,omitempty"`
	ResponseCache        *ResponseCache `json:"response_cache,omitempty"` // the prefix cache as the responses' usage tells it
	Gate                 *GateRecord    `json:"gate,omitempty"`

	// Classes is latency by request class, Instances the prefix cache per
	// instance and its spread; see classes.go.
	Classes   *ClassSummary   `json:"classes,omitempty"`
	Instances *InstanceCaches `json:"instances,omitempty"`

	// SLO is the objective the run was held to (Policy.SLO); SLOMet,
	// Goodput and SLOAttainment are counted against it (applySLO). All are
	// absent when the run had no SLO.
	SLO           *SLO     `json:"slo,omitempty"`
	SLOMet        *int     `json:"slo_met,omitempty"`
	Goodput       *float64 `json:"request_goodput,omitempty"`
	SLOAttainment *float64 `json:"slo_attainment,omitempty"`

	// The percentiles beyond the median, p90 and p99 (percentiles.go):
	// p95 always, others as the run asked for them, keyed p<p>_<metric>_ms.
	P95TTFTMs   *float64           `json:"p95_ttft_ms"`
	P95TPOTMs   *float64           `json:"p95_tpot_ms"`
	P95ITLMs    *float64           `json:"p95_itl_ms"`
	P95E2ELMs   *float64           `json:"p95_e2el_ms"`
	Percentiles map[string]float64 `json:"percentiles,omitempty"`
	// NaturalLength: the requests let the engine end at end-of-sequence
	// (ignore_eos off); OutputLengths is the output tokens' distribution.
	NaturalLength bool         `json:"natural_length,omitempty"`
	OutputLengths *LengthStats `json:"output_lengths,omitempty"`
	// Label and Metadata are the user's record of the run (mbench load
	// --label and --metadata, as vllm bench serve writes them).
	Label    string            `json:"label,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// fields are the summary fields of l's statistics (LatencyStats; only p90
// and p99 for TTFTIntended): where SummarizeRun writes them and the
// registry reads them.
func (l Latency) fields(s *RunSummary) map[string]**float64 {
	switch l.Name {
	case TTFT.Name:
		return map[string]**float64{StatMean: &s.MeanTTFTMs, StatMedian: &s.MedianTTFTMs, StatStd: &s.StdTTFTMs, StatP90: &s.P90TTFTMs, StatP95: &s.P95TTFTMs, StatP99: &s.P99TTFTMs}
	case TPOT.Name:
		return map[string]**float64{StatMean: &s.MeanTPOTMs, StatMedian: &s.MedianTPOTMs, StatStd: &s.StdTPOTMs, StatP90: &s.P90TPOTMs, StatP95: &s.P95TPOTMs, StatP99: &s.P99TPOTMs}
	case ITL.Name:
		return map[string]**float64{StatMean: &s.MeanITLMs, StatMedian: &s.MedianITLMs, StatStd: &s.StdITLMs, StatP90: &s.P90ITLMs, StatP95: &s.P95ITLMs, StatP99: &s.P99ITLMs}
	case E2EL.Name:
		return map[string]**float64{StatMean: &s.MeanE2ELMs, StatMedian: &s.MedianE2ELMs, StatStd: &s.StdE2ELMs, StatP90: &s.P90E2ELMs, StatP95: &s.P95E2ELMs, StatP99: &s.P99E2ELMs}
	case TTFTIntended.Name:
		return map[string]**float64{StatP90: &s.P90TTFTIntendedMs, StatP99: &s.P99TTFTIntendedMs}
	}
	return nil
}

// fillLatency sets the statistics of l in s from its values xs (ms),
// sorting xs; all stay nil when xs is empty.
func fillLatency(s *RunSummary, l Latency, xs []float64) {
	if len(xs) == 0 {
		return
	}
	sort.Float64s(xs)
	for stat, f := range l.fields(s) {
		switch stat {
		case StatMean:
			*f = ptr(stats.Mean(xs))
		case StatMedian:
			*f = ptr(stats.PercentileSorted(xs, 50))
		case StatStd:
			*f = ptr(stats.PopStd(xs))
		default:
			p, _ := strconv.ParseFloat(stat[1:], 64)
			*f = ptr(stats.PercentileSorted(xs, p))
		}
	}
}

// ptr returns a pointer to v, or nil when v is NaN or infinite.
func ptr(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// SummarizeRun computes a run's summary_A.json from its records, as
// `vllm bench serve` defines the metrics: only records of phase "measure"
// count; completed = status "ok", failed = every other status; TTFT =
// first_token − sent, E2EL = last_token − sent, TPOT = (E2EL − TTFT) /
// (output_tokens − 1) for output_tokens > 1, ITL = every itl_ms pooled;
// percentiles by linear interpolation. duration = WindowEnd − WindowStart (the
// first measured send to the last measured request's end); request_throughput = completed / duration; achieved_rate =
// the measured requests the server acknowledged (response head received)
// within the schedule's window (first to last scheduled send + 5 ms) over
// that window (openloop.Grade.AchievedRate; the sends, for records without
// head_ns), or, without scheduled times, (sends − 1) / (last send − first
// send); sent_rate = the requests written within that window over it;
// thr_ratio as RunSummary.ThrRatio defines it.
//
// It grades the run: saturated when thr_ratio < 0.9, when the run was
// aborted, or when TTFT rises through the window (least-squares slope of TTFT
// against send time with one-sided p < 0.01 and a fitted rise over the window
// above half the median TTFT). Send lag, the KS test and client_limited are
// the load generator's own grading, in.Grade or openloop.SelfGrade over the
// records (see RunInput.Grade and the rule at openloop.ClientLateMs). The
// reasons are in words.
func SummarizeRun(in RunInput) (*RunSummary, error) {
	if err := in.check(); err != nil {
		return nil, fmt.Errorf("summarize run %s b%d: %w", in.Cell, in.Block, err)
	}
	s := &RunSummary{
		Simulated: in.Simulated, Engine: in.Engine, Cell: in.Cell, Config: in.Config, Shape: in.Shape,
		Rate: in.Rate, Block: in.Block, Arrival: in.Arrival, OfferedRate: in.Offered,
		Aborted: in.Aborted, AbortReason: in.AbortReason, AbortCause: in.AbortCause, StopReason: in.StopReason, ClientCPUPct: in.ClientCPUPct, HostCPU: in.HostCPU, Contention: in.Contention,
		Errors: map[string]int{}, ErrorExamples: map[string]string{}, EngineStep: in.Steps, GPU: in.GPU, PrefixCache: in.Cache, Gate: in.Gate,
		ResponseCache: summarizeResponseCache(in.Records),
	}
	if !in.WindowStart.IsZero() {
		s.WindowStart = in.WindowStart.UTC().Format(time.RFC3339Nano)
		s.WindowEnd = in.WindowEnd.UTC().Format(time.RFC3339Nano)
		s.Duration = in.WindowEnd.Sub(in.WindowStart).Seconds()
	}
	var sends, sched, trendX, trendY []float64
	lat := make([][]float64, len(summarized)) // by summarized; lat[0] is TTFT
	for i := range in.Records {
		r := &in.Records[i]
		if r.Phase != openloop.PhaseMeasure {
			continue
		}
		s.NumPrompts++
		if r.ScheduledNs > 0 {
			sched = append(sched, float64(r.ScheduledNs))
		}
		if r.SentNs > 0 {
			sends = append(sends, float64(r.SentNs))
		}
		if r.Status != openloop.StatusOK {
			countFailure(s, r)
			continue
		}
		s.Completed++
		s.TotalInputTokens += int64(r.InputTokens)
		s.TotalOutputTokens += int64(r.OutputTokens)
		markUsage(s, r, in.NaturalLength)
		n := len(lat[0])
		for i, l := range summarized {
			lat[i] = l.Append(lat[i], r)
		}
		if len(lat[0]) > n { // the TTFT trend, against send time
			trendX = append(trendX, float64(r.SentNs)/1e9)
			trendY = append(trendY, lat[0][n])
		}
	}
	if s.Duration > 0 {
		s.RequestThroughput = float64(s.Completed) / s.Duration
		s.OutputThroughput = float64(s.TotalOutputTokens) / s.Duration
	}
	if r, ok := spanRate(sched); ok {
		s.OfferedRealized = ptr(r)
	}
	if n := s.Completed + s.CutWaiting; n > 0 {
		s.ThrRatio = ptr(float64(s.Completed) / float64(n))
	}
	byName := map[string][]float64{}
	for i, l := range summarized {
		fillLatency(s, l, lat[i])
		byName[l.Name] = lat[i]
	}
	fillPercentiles(s, in.Percentiles, byName)
	s.NaturalLength, s.OutputLengths, s.Label, s.Metadata = in.NaturalLength, outputLengths(in.Records), in.Label, in.Metadata
	applySLO(s, in.Records, in.Policy.SLO)
	gradeSends(s, sends, in)
	gradeSaturation(s, trendX, trendY, lat[0])
	Decide(s, in.Policy)
	return s, nil
}

// check refuses an input whose rates are not numbers or whose window ends
// before it starts.
func (in *RunInput) check() error {
	if in.Offered < 0 || math.IsNaN(in.Offered) || math.IsInf(in.Offered, 0) {
		return fmt.Errorf("offered rate %v is not a rate", in.Offered)
	}
	for name, v := range map[string]float64{"rate": in.Rate, "client CPU": in.ClientCPUPct, "burstiness": in.Burstiness} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s is %v", name, v)
		}
	}
	if !in.WindowStart.IsZero() && in.WindowEnd.Before(in.WindowStart) {
		return fmt.Errorf("window ends (%s) before it starts (%s)", in.WindowEnd, in.WindowStart)
	}
	return nil
}

// countFailure counts a failed measured request by its class (keeping the
// class's first example), and as cut off waiting or streaming when the
// harness ended it.
func countFailure(s *RunSummary, r *Record) {
	s.Failed++
	class := errorClass(r)
	s.Errors[class]++
	if _, ok := s.ErrorExamples[class]; !ok {
		s.ErrorExamples[class] = errorExample(r)
	}
	switch {
	case !harnessCut(class):
	case r.FirstTokenNs > 0:
		s.CutStreaming++
	default:
		s.CutWaiting++
	}
}

// summarized are the latencies a run summary has statistics of, TTFT
// first.
var summarized = []Latency{TTFT, TPOT, ITL, E2EL, TTFTIntended}

// HostCPU is the CPU of the load generator's machine over a run, each as a
// percentage: BusyPct and StealPct of all its cores (busy: user, nice,
// system, irq, softirq; steal: time the hypervisor ran something else),
// ClientPct of one core (mbench's own, client_cpu_pct). BusyPct well above
// ClientPct on a machine with the engine is the engine's share and any
// other tenant's; steal is time no process on it got.
type HostCPU struct {
	BusyPct   float64 `json:"busy_pct"`
	StealPct  float64 `json:"steal_pct"`
	ClientPct float64 `json:"client_pct"`
}

// markUsage counts a completed request whose token count is not what the
// stream should have said: no usage chunk, or, for fixed lengths (natural
// false), fewer tokens than asked for.
func markUsage(s *RunSummary, r *Record, natural bool) {
	switch {
	case r.UsageMissing:
		s.UsageMissing++
	case !natural && r.MaxTokens > 0 && r.OutputTokens < r.MaxTokens:
		s.ShortOutputs++
		s.ShortOutputExample = cmp.Or(s.ShortOutputExample, fmt.Sprintf("request %d: %d of the %d tokens asked for", r.ID, r.OutputTokens, r.MaxTokens))
		share := float64(r.OutputTokens) / float64(r.MaxTokens)
		s.ShortOutputMeanShare = cmp.Or(s.ShortOutputMeanShare, new(0.0))
		*s.ShortOutputMeanShare += (share - *s.ShortOutputMeanShare) / float64(s.ShortOutputs)
		if s.ShortOutputFinish == nil {
			s.ShortOutputFinish = map[string]int{}
		}
		s.ShortOutputFinish[cmp.Or(r.FinishReason, "none")]++
	}
}
