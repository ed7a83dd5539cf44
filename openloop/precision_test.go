package openloop

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/stats"

	"github.com/mbench/mbench/openloop/stub"
)

func TestMeasurePrecisionSmoke(t *testing.T) {
	var out strings.Builder
	rows, err := MeasurePrecision(context.Background(), []float64{100}, 400*time.Millisecond, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	if len(rows) != 1 || rows[0].Sent < 20 || rows[0].OKRatio != 1 || math.IsNaN(rows[0].TTFTErrP99Ms) || !strings.Contains(out.String(), "ach/off") {
		t.Errorf("rows %+v", rows)
	}
}

// envFloats reads a comma-separated list of numbers from the environment.
func envFloats(name string, def []float64) []float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []float64
	for _, f := range strings.Split(v, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err == nil {
			out = append(out, x)
		}
	}
	return out
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

// TestPrecisionModes compares the waiter's strategies. It runs only
// with MBENCH_PRECISION_MODES=1 (rates from MBENCH_RATES, duration from
// MBENCH_DURATION).
func TestPrecisionModes(t *testing.T) {
	if os.Getenv("MBENCH_PRECISION_MODES") == "" {
		t.Skip("set MBENCH_PRECISION_MODES=1 to compare the wait modes")
	}
	rates := envFloats("MBENCH_RATES", []float64{500, 1000, 2000, 4000, 8000})
	dur := envDuration("MBENCH_DURATION", 3*time.Second)
	for _, m := range []struct {
		name string
		mode int
	}{{"timerfd", waitTimerfd}, {"spin", waitSpin}, {"nanosleep", waitNanosleep}} {
		fmt.Printf("wait mode %s\n", m.name)
		if _, err := measurePrecision(context.Background(), rates, dur, os.Stdout, m.mode); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkLoad is `task bench:load`: the generator's precision against the
// in-tree stub, one sub-benchmark per rate (MBENCH_RATES, default
// 500,1000,2000,4000,8000 req/s; MBENCH_DURATION, default 3s). Run it with
// -benchtime=1x; the table goes to stdout.
func BenchmarkLoad(b *testing.B) {
	rates := envFloats("MBENCH_RATES", []float64{500, 1000, 2000, 4000, 8000})
	dur := envDuration("MBENCH_DURATION", 3*time.Second)
	if os.Getenv("MBENCH_STUB_FLUSH_EACH") != "" {
		PrecisionStub.Burst = false // flush every token: the stub costs more CPU
	}
	WritePrecisionHeader(os.Stdout)
	for _, rate := range rates {
		b.Run(fmt.Sprintf("rate=%g", rate), func(b *testing.B) {
			for b.Loop() {
				rows, err := MeasurePrecision(context.Background(), []float64{rate}, dur, nil)
				if err != nil {
					b.Fatal(err)
				}
				r := rows[0]
				WritePrecisionRow(os.Stdout, r)
				b.ReportMetric(r.AchievedRatio, "achieved/offered")
				b.ReportMetric(r.LagP99Ms, "lag-p99-ms")
				b.ReportMetric(r.TTFTErrP99Ms, "ttft-err-p99-ms")
				b.ReportMetric(r.CPUPct, "cpu-%")
			}
		})
	}
}

// TestPrecisionDiag prints, for one run per rate, how the sent gaps differ
// from the scheduled ones, the GC's pauses, and when lags above 2 ms
// happened (MBENCH_PRECISION_DIAG=1).
func TestPrecisionDiag(t *testing.T) {
	if os.Getenv("MBENCH_PRECISION_DIAG") == "" {
		t.Skip("set MBENCH_PRECISION_DIAG=1")
	}
	srv, err := stubStart()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, rate := range envFloats("MBENCH_RATES", []float64{2000}) {
		srv.Reset()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		res, err := Run(context.Background(), Config{Targets: []string{srv.URL}, Model: "stub-model", Rate: rate,
			Shape: Shape{Input: 64, Output: 16}, Seed: 1, Warmup: int(rate / 4), Duration: envDuration("MBENCH_DURATION", 3*time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&m1)
		var maxPause uint64
		for i := m0.NumGC; i < m1.NumGC && i < m0.NumGC+256; i++ {
			maxPause = max(maxPause, m1.PauseNs[i%256])
		}
		var sched, sent []float64
		var spikes []string
		for _, r := range res.Records {
			if r.Phase == PhaseMeasure {
				sched = append(sched, float64(r.ScheduledNs))
				sent = append(sent, float64(r.SentNs))
			}
			if r.Lag() > 2*time.Millisecond && len(spikes) < 12 {
				spikes = append(spikes, fmt.Sprintf("%.1fms:+%.1f", float64(r.ScheduledNs)/1e6, float64(r.Lag())/1e6))
			}
		}
		sort.Float64s(sent)
		gaps := func(xs []float64) []float64 {
			g := make([]float64, len(xs)-1)
			for i := range g {
				g[i] = (xs[i+1] - xs[i]) / 1e9
			}
			return g
		}
		cdf := gapCDF(Arrival{}, rate)
		_, ps := stats.KSTest(gaps(sched), cdf)
		_, pt := stats.KSTest(gaps(sent), cdf)
		dg, pg := stats.KSTestGrid(gaps(sent), cdf, KSResolution.Seconds())
		fmt.Printf("rate %g: KS p sched %.3g sent %.3g grid D=%.4f p=%.3g; lag p50 %.3f p99 %.3f max %.2f ms; GCs %d, max pause %.2f ms, pause total %.2f ms; cpu %.0f%%\n  lags > 2 ms (sched:+lag): %v\n",
			rate, ps, pt, dg, pg, res.Grade.LagP50Ms, res.Grade.LagP99Ms, res.Grade.LagMaxMs, m1.NumGC-m0.NumGC, float64(maxPause)/1e6,
			float64(m1.PauseTotalNs-m0.PauseTotalNs)/1e6, res.ClientCPUPct, spikes)
	}
}

func stubStart() (*stub.Server, error) { return stub.Start(PrecisionStub) }

// MeasurePrecision measures the load generator on this machine against an
// in-process stub (PrecisionStub) on 127.0.0.1: see MeasurePrecisionAgainst.
// The stub shares the process, so CPU covers both; `mbench bench-load` runs
// the stub in a process of its own instead.
func MeasurePrecision(ctx context.Context, rates []float64, dur time.Duration, w io.Writer) ([]PrecisionRow, error) {
	return measurePrecision(ctx, rates, dur, w, defaultWaitMode)
}

func measurePrecision(ctx context.Context, rates []float64, dur time.Duration, w io.Writer, mode int) ([]PrecisionRow, error) {
	srv, err := stub.Start(PrecisionStub)
	if err != nil {
		return nil, fmt.Errorf("precision: starting the stub: %w", err)
	}
	defer srv.Close()
	tgt := PrecisionTarget{URL: srv.URL, Output: PrecisionStub.Tokens,
		Reset:   func(context.Context) error { srv.Reset(); return nil },
		Entries: func(context.Context) ([]stub.Entry, error) { return srv.Entries(), nil }}
	if w != nil {
		WritePrecisionHeader(w)
	}
	var rows []PrecisionRow
	for _, rate := range rates {
		row, err := measureOne(ctx, tgt, rate, dur, mode)
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
		if w != nil {
			WritePrecisionRow(w, row)
		}
	}
	return rows, nil
}

// PrecisionStub is the stub of MeasurePrecision: RealisticStub.
var PrecisionStub = RealisticStub
