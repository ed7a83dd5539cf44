package openloop

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mbench/mbench/stats"

	"github.com/mbench/mbench/openloop/stub"
)

// The load generator's precision criteria: a rate "holds" when the achieved/scheduled
// send ratio is at least PrecisionMinRatio and send lag p99 at most
// PrecisionMaxLagP99Ms.
const (
	PrecisionMinRatio    = 0.99
	PrecisionMaxLagP99Ms = 5.0
)

// PrecisionRow is the generator's precision at one offered rate.
type PrecisionRow struct {
	Client        string  `json:"client,omitempty"` // which load generator (bench-load: mbench, or the compared one)
	Rate          float64 `json:"rate"`             // offered, req/s (Poisson)
	Sent          int     `json:"sent"`             // measured requests sent
	AchievedRatio float64 `json:"achieved_ratio"`   // sent within the schedule's window / scheduled (Grade.AchievedRatio)
	OKRatio       float64 `json:"ok_ratio"`         // completed OK / sent
	LagP50Ms      float64 `json:"lag_p50_ms"`
	LagP99Ms      float64 `json:"lag_p99_ms"`
	LagMaxMs      float64 `json:"lag_max_ms"`
	// TTFT error: client-measured TTFT minus the stub's own (first flush
	// minus arrival, logged server-side), joined on X-Request-Id.
	TTFTErrP50Ms float64 `json:"ttft_err_p50_ms"`
	TTFTErrP99Ms float64 `json:"ttft_err_p99_ms"`
	// ServerRatio is the requests the stub saw arrive within the schedule's
	// window (plus 5 ms) over those scheduled: the achieved ratio by the
	// server's clock.
	ServerRatio    float64 `json:"server_ratio"`
	CPUPct         float64 `json:"cpu_pct"`           // this process's CPU during the run, % of one core
	ClientCPUMsReq float64 `json:"client_cpu_ms_req"` // this process's CPU per request sent, ms
	StubCPUMsReq   float64 `json:"stub_cpu_ms_req"`   // the stub process's CPU per request, ms (0 for an in-process stub)
	LoadAvg        float64 `json:"loadavg"`           // the machine's 1-minute load average after the run (0 where unknown)
	KSP            float64 `json:"ks_p"`              // KS p-value of the sent gaps against the exponential
	ClientLimited  bool    `json:"client_limited"`    // the run's self-grading
	Holds          bool    `json:"holds"`             // ratio ≥ 0.99 and lag p99 ≤ 5 ms
}

// PrecisionInput is the prompt length of the precision runs, in tokens.
const PrecisionInput = 256

// PrecisionTarget is the stub a precision measurement runs against.
type PrecisionTarget struct {
	URL     string
	Reset   func(context.Context) error                 // clears the stub's log
	Entries func(context.Context) ([]stub.Entry, error) // the stub's log
	CPU     func() (float64, error)                     // the stub's CPU seconds so far; nil when it shares this process
	Output  int                                         // tokens the stub streams per request
}

// MeasurePrecisionAgainst runs Poisson load at rate against the stub t for
// dur (after a quarter second of warmup), with PrecisionInput-token prompts,
// and reports the achieved/scheduled send ratio (and the same by the stub's
// clock), send lag, TTFT error against the stub's ground truth, and CPU per
// request of this process and of the stub.
func MeasurePrecisionAgainst(ctx context.Context, t PrecisionTarget, rate float64, dur time.Duration) (PrecisionRow, error) {
	return measureOne(ctx, t, rate, dur, defaultWaitMode)
}

func measureOne(ctx context.Context, t PrecisionTarget, rate float64, dur time.Duration, mode int) (PrecisionRow, error) {
	if err := t.Reset(ctx); err != nil {
		return PrecisionRow{}, fmt.Errorf("precision: %w", err)
	}
	cfg := Config{
		Targets: []string{t.URL}, Model: "stub-model", Rate: rate,
		Shape: Shape{Name: "precision", Input: PrecisionInput, Output: t.Output}, Seed: 1,
		Warmup: int(math.Ceil(rate / 4)), Duration: dur, DrainTimeout: 10 * time.Second,
	}
	var s0, s1 float64
	if t.CPU != nil {
		s0, _ = t.CPU()
	}
	c0, _ := cpuSeconds()
	r := newRunner(cfg, mode)
	res, err := r.run(ctx)
	if err != nil {
		return PrecisionRow{}, fmt.Errorf("precision: rate %v: %w", rate, err)
	}
	c1, _ := cpuSeconds()
	if t.CPU != nil {
		s1, _ = t.CPU()
	}
	entries, err := t.Entries(ctx)
	if err != nil {
		return PrecisionRow{}, fmt.Errorf("precision: %w", err)
	}
	row := PrecisionOf(rate, res, entries)
	if n := float64(len(res.Records)); n > 0 {
		row.ClientCPUMsReq = 1e3 * (c1 - c0) / n
		row.StubCPUMsReq = 1e3 * (s1 - s0) / n
	}
	row.LoadAvg = LoadAvg()
	return row, nil
}

// LoadAvg is the 1-minute load average (Linux), 0 where unknown.
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// WritePrecisionHeader writes the header of the precision table.
func WritePrecisionHeader(w io.Writer) {
	fmt.Fprintf(w, "%-8s %7s %6s %8s %8s %8s %8s %8s %9s %9s %8s %8s %6s %6s %6s\n", "client", "rate", "sent", "ach/off", "server", "lag p50", "lag p99",
		"lag max", "TTFTe p50", "TTFTe p99", "cli ms/r", "stub ms/r", "load", "grade", "holds")
}

// WritePrecisionRow writes one row of the precision table (times in ms; an
// unnamed client is mbench).
func WritePrecisionRow(w io.Writer, r PrecisionRow) {
	grade := "ok"
	if r.ClientLimited {
		grade = "limit"
	}
	fmt.Fprintf(w, "%-8s %7g %6d %8.4f %8.4f %8.3f %8.3f %8.2f %9.3f %9.3f %8.3f %8.3f %6.2f %6s %6v\n", cmp.Or(r.Client, "mbench"), r.Rate, r.Sent, r.AchievedRatio,
		r.ServerRatio, r.LagP50Ms, r.LagP99Ms, r.LagMaxMs, r.TTFTErrP50Ms, r.TTFTErrP99Ms, r.ClientCPUMsReq, r.StubCPUMsReq, r.LoadAvg, grade, r.Holds)
}

// PrecisionOf grades one run (res.Grade, its records against res.Start)
// and joins it with the stub's log by request id: the precision figures of
// a run of any client whose records are in this package's form.
func PrecisionOf(rate float64, res *Result, entries []stub.Entry) PrecisionRow {
	g := res.Grade
	row := PrecisionRow{Rate: rate, Sent: g.Sent, AchievedRatio: g.AchievedRatio, OKRatio: g.OKRatio,
		LagP50Ms: g.LagP50Ms, LagP99Ms: g.LagP99Ms, LagMaxMs: g.LagMaxMs, CPUPct: res.ClientCPUPct, KSP: g.KSP, ClientLimited: g.ClientLimited}
	row.Holds = g.AchievedRatio >= PrecisionMinRatio && g.LagP99Ms <= PrecisionMaxLagP99Ms
	byID := make(map[string]stub.Entry, len(entries))
	for _, e := range entries {
		byID[e.RequestID] = e
	}
	var errs []float64
	measured := make(map[string]bool, len(res.Records))
	first, last, scheduled := int64(math.MaxInt64), int64(math.MinInt64), 0
	for i := range res.Records {
		rec := &res.Records[i]
		if rec.Phase != PhaseMeasure {
			continue
		}
		scheduled++
		measured[rec.RequestID] = true
		first, last = min(first, rec.ScheduledNs), max(last, rec.ScheduledNs)
		if !rec.OK() {
			continue
		}
		if e, ok := byID[rec.RequestID]; ok && e.TTFT() > 0 {
			errs = append(errs, float64(rec.TTFT()-e.TTFT())/1e6)
		}
	}
	sort.Float64s(errs)
	row.TTFTErrP50Ms, row.TTFTErrP99Ms = stats.Quantile(errs, 0.5), stats.Quantile(errs, 0.99)
	if scheduled > 0 {
		lo, hi := res.Start.Add(time.Duration(first)), res.Start.Add(time.Duration(last)+time.Duration(ClientLateMs*1e6))
		seen := 0
		for _, e := range entries {
			if !e.Arrival.Before(lo) && !e.Arrival.After(hi) && measured[e.RequestID] {
				seen++
			}
		}
		row.ServerRatio = float64(seen) / float64(scheduled)
	}
	return row
}

// RealisticStub streams like an engine under load: 16 tokens, each flushed
// on its own, the first 20 ms after arrival, then one every millisecond.
var RealisticStub = stub.Options{Tokens: 16, FirstToken: 20 * time.Millisecond, Gap: time.Millisecond}
