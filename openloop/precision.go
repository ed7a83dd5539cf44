package openloop

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// Precision criteria of issue 8: a rate "holds" when the achieved/scheduled
// send ratio is at least PrecisionMinRatio and send lag p99 at most
// PrecisionMaxLagP99Ms.
const (
	PrecisionMinRatio    = 0.99
	PrecisionMaxLagP99Ms = 5.0
)

// PrecisionRow is the generator's precision at one offered rate.
type PrecisionRow struct {
	Rate          float64 `json:"rate"`           // offered, req/s (Poisson)
	Sent          int     `json:"sent"`           // measured requests sent
	AchievedRatio float64 `json:"achieved_ratio"` // achieved send rate / scheduled rate
	OKRatio       float64 `json:"ok_ratio"`       // completed OK / sent
	LagP50Ms      float64 `json:"lag_p50_ms"`
	LagP99Ms      float64 `json:"lag_p99_ms"`
	LagMaxMs      float64 `json:"lag_max_ms"`
	// TTFT error: client-measured TTFT minus the stub's own (first flush
	// minus arrival, logged server-side).
	TTFTErrP50Ms float64 `json:"ttft_err_p50_ms"`
	TTFTErrP99Ms float64 `json:"ttft_err_p99_ms"`
	CPUPct       float64 `json:"cpu_pct"` // process CPU during the run, % of one core (client and in-process stub)
	KSP          float64 `json:"ks_p"`    // KS p-value of the sent gaps against the exponential
	Holds        bool    `json:"holds"`   // ratio ≥ 0.99 and lag p99 ≤ 5 ms
}

// PrecisionStub is the stub MeasurePrecision runs against: 16 tokens per
// request, the first flushed alone after 1 ms, the other 15 with the usage
// chunk and [DONE] in one more flush (Burst), so that the stub, which shares
// the machine, spends as little CPU as it can.
var PrecisionStub = stub.Options{Tokens: 16, FirstToken: time.Millisecond, Burst: true}

// MeasurePrecision measures the load generator on this machine: it starts the
// in-tree stub on 127.0.0.1, runs Poisson load at each rate for dur (after a
// quarter second of warmup), and reports per rate the achieved/scheduled send
// ratio, send lag, TTFT error against the stub's ground truth and CPU. The
// table (times in ms) is written to w as it goes (w may be nil). The stub shares the
// process and the machine with the client, so CPU covers both.
func MeasurePrecision(ctx context.Context, rates []float64, dur time.Duration, w io.Writer) ([]PrecisionRow, error) {
	return measurePrecision(ctx, rates, dur, w, defaultWaitMode)
}

func measurePrecision(ctx context.Context, rates []float64, dur time.Duration, w io.Writer, mode int) ([]PrecisionRow, error) {
	srv, err := stub.Start(PrecisionStub)
	if err != nil {
		return nil, fmt.Errorf("precision: starting the stub: %w", err)
	}
	defer srv.Close()
	if w != nil {
		WritePrecisionHeader(w)
	}
	var rows []PrecisionRow
	for _, rate := range rates {
		srv.Reset()
		cfg := Config{
			Targets: []string{srv.URL}, Model: "stub-model", Rate: rate,
			Shape: Shape{Name: "precision", Input: 64, Output: 16}, Seed: 1,
			Warmup: int(math.Ceil(rate / 4)), Duration: dur, DrainTimeout: 10 * time.Second,
		}
		r := &runner{cfg: cfg, mode: mode, stopCh: make(chan struct{}), sinkCh: make(chan Record, 8192), sinkDone: make(chan struct{})}
		res, err := r.run(ctx)
		if err != nil {
			return rows, fmt.Errorf("precision: rate %v: %w", rate, err)
		}
		row := precisionRow(rate, res, srv.Entries())
		rows = append(rows, row)
		if w != nil {
			WritePrecisionRow(w, row)
		}
	}
	return rows, nil
}

// WritePrecisionHeader writes the header of the precision table.
func WritePrecisionHeader(w io.Writer) {
	fmt.Fprintf(w, "%7s %6s %9s %8s %8s %8s %9s %9s %6s %8s %6s\n", "rate", "sent", "ach/off", "lag p50", "lag p99",
		"lag max", "TTFTe p50", "TTFTe p99", "CPU%", "KS p", "holds")
}

// WritePrecisionRow writes one row of the precision table (times in ms).
func WritePrecisionRow(w io.Writer, r PrecisionRow) {
	fmt.Fprintf(w, "%7g %6d %9.4f %8.3f %8.3f %8.2f %9.3f %9.3f %6.0f %8.3g %6v\n", r.Rate, r.Sent, r.AchievedRatio,
		r.LagP50Ms, r.LagP99Ms, r.LagMaxMs, r.TTFTErrP50Ms, r.TTFTErrP99Ms, r.CPUPct, r.KSP, r.Holds)
}

// precisionRow grades one run and joins it with the stub's log by request id.
func precisionRow(rate float64, res *Result, entries []stub.Entry) PrecisionRow {
	g := res.Grade
	row := PrecisionRow{Rate: rate, Sent: g.Sent, AchievedRatio: g.AchievedRatio, OKRatio: g.OKRatio,
		LagP50Ms: g.LagP50Ms, LagP99Ms: g.LagP99Ms, LagMaxMs: g.LagMaxMs, CPUPct: res.ClientCPUPct, KSP: g.KSP}
	row.Holds = g.AchievedRatio >= PrecisionMinRatio && g.LagP99Ms <= PrecisionMaxLagP99Ms
	truth := make(map[string]time.Duration, len(entries))
	for _, e := range entries {
		truth[e.ID] = e.TTFT()
	}
	var errs []float64
	for i := range res.Records {
		rec := &res.Records[i]
		if rec.Phase != PhaseMeasure || !rec.OK() {
			continue
		}
		if t, ok := truth[strconv.Itoa(rec.ID)]; ok && t > 0 {
			errs = append(errs, float64(rec.TTFT()-t)/1e6)
		}
	}
	sort.Float64s(errs)
	row.TTFTErrP50Ms, row.TTFTErrP99Ms = quantile(errs, 0.5), quantile(errs, 0.99)
	return row
}

// RealisticStub streams like an engine under load: 16 tokens, each flushed
// on its own, the first 20 ms after arrival, then one every millisecond.
var RealisticStub = stub.Options{Tokens: 16, FirstToken: 20 * time.Millisecond, Gap: time.Millisecond}
