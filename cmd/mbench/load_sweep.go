package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"github.com/urfave/cli/v2"
)

// sweepRow is one run of a --profile sweep.
type sweepRow struct {
	Profile string              `json:"profile"` // synchronous, throughput, poisson
	Rate    any                 `json:"request_rate"`
	Out     string              `json:"out"`
	Summary *results.RunSummary `json:"-"`
}

// loadSweep runs GuideLLM's sweep profile: synchronous (one request in
// flight), throughput (every request at once, the cap of
// --max-concurrency kept), then lr.sweepRates Poisson rates evenly spaced
// strictly between the two runs' request throughputs; each run in its own
// directory of --out, then one table. The exit status counts the
// synchronous and rate runs: a burst's queueing is its point, and its
// verdict is shown, not held against the sweep.
func loadSweep(c *cli.Context, base *loadRun) error {
	var rows []sweepRow
	run := func(profile string, set func(*loadRun)) (*results.RunSummary, error) {
		lr := *base
		set(&lr)
		lr.out = filepath.Join(base.out, fmt.Sprintf("%02d-%s", len(rows)+1, profile))
		if profile == "poisson" {
			lr.out += fmt.Sprintf("-%.4g", lr.cfg.Rate)
		}
		fmt.Fprintf(c.App.ErrWriter, "load: sweep run %d of %d: %s\n", len(rows)+1, base.sweepRates+2, filepath.Base(lr.out))
		sum, _, runErr, err := runLoad(c, &lr)
		if err != nil {
			return nil, err
		}
		if runErr != nil {
			return nil, loadOutcome(sum, runErr)
		}
		rows = append(rows, sweepRow{Profile: profile, Rate: lr.rate, Out: lr.out, Summary: sum})
		return sum, nil
	}
	sync, err := run("synchronous", func(lr *loadRun) {
		lr.cfg.Rate, lr.rate = 0, "inf"
		lr.cfg.Arrival = openloop.Arrival{Process: openloop.ArrivalConcurrency, InFlight: 1}
	})
	if err != nil {
		return err
	}
	thr, err := run("throughput", func(lr *loadRun) {
		lr.cfg.Rate, lr.rate = math.Inf(1), "inf"
		lr.cfg.Arrival = openloop.Arrival{Process: openloop.ArrivalPoisson, MaxInFlight: base.cfg.Arrival.MaxInFlight}
	})
	if err != nil {
		return err
	}
	lo, _ := results.RequestThroughput.Value(sync)
	hi, _ := results.RequestThroughput.Value(thr)
	if !(lo > 0) || !(hi > lo) {
		writeSweepTable(c.App.Writer, rows)
		return noResultError{fmt.Errorf("load: --profile sweep: throughput %.3g req/s is not above synchronous %.3g req/s: no rates between to run", hi, lo)}
	}
	for i := 1; i <= base.sweepRates; i++ {
		r := lo + (hi-lo)*float64(i)/float64(base.sweepRates+1)
		if _, err := run("poisson", func(lr *loadRun) {
			lr.cfg.Rate, lr.rate = r, r
			lr.cfg.Arrival = openloop.Arrival{Process: openloop.ArrivalPoisson, MaxInFlight: base.cfg.Arrival.MaxInFlight}
		}); err != nil {
			return err
		}
	}
	if c.String("format") == "json" {
		b, err := json.MarshalIndent(sweepJSON(rows), "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "%s\n", b)
	} else {
		writeSweepTable(c.App.Writer, rows)
	}
	var bad []string
	for _, r := range rows {
		if r.Profile != "throughput" && !r.Summary.Verdict.Usable() {
			bad = append(bad, fmt.Sprintf("%s (%s)", filepath.Base(r.Out), r.Summary.Verdict))
		}
	}
	if len(bad) > 0 {
		return noResultError{errors.New("load: --profile sweep: not a result: " + strings.Join(bad, ", "))}
	}
	return nil
}

// sweepJSON is the sweep's rows with their key figures, for --format json.
func sweepJSON(rows []sweepRow) []map[string]any {
	var out []map[string]any
	for _, r := range rows {
		s := r.Summary
		row := map[string]any{"profile": r.Profile, "request_rate": r.Rate, "out": r.Out, "verdict": s.Verdict}
		for _, m := range []results.Metric{results.Completed, results.Failed, results.RequestThroughput, results.OutputThroughput} {
			row[m.Key], _ = m.Value(s)
		}
		for _, l := range []results.Latency{results.TTFT, results.TPOT} {
			for _, stat := range []string{results.StatMedian, results.StatP99} {
				row[l.Key(stat)] = l.Stat(s, stat)
			}
		}
		out = append(out, row)
	}
	return out
}

// writeSweepTable is the sweep as one table: rate against TTFT, TPOT,
// throughput and verdict, one row per run.
func writeSweepTable(w io.Writer, rows []sweepRow) {
	value := func(m results.Metric, s *results.RunSummary) float64 {
		v, _ := m.Value(s)
		return v
	}
	stat := func(l results.Latency, s *results.RunSummary, stat string) string {
		if p := l.Stat(s, stat); p != nil {
			return fmt.Sprintf("%.2f", *p)
		}
		return "n/a"
	}
	fmt.Fprintf(w, "%-12s %10s %9s %10s %12s %10s %10s %10s %10s  %s\n", "profile", "rate", "completed", "req/s", "output tok/s",
		"TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "verdict")
	for _, r := range rows {
		s := r.Summary
		rate := fmt.Sprint(r.Rate)
		if x, ok := r.Rate.(float64); ok {
			rate = fmt.Sprintf("%.2f", x)
		}
		if r.Profile == "synchronous" {
			rate = "1 in flight"
		}
		fmt.Fprintf(w, "%-12s %10s %9.0f %10.2f %12.2f %10s %10s %10s %10s  %s\n", r.Profile, rate,
			value(results.Completed, s), value(results.RequestThroughput, s), value(results.OutputThroughput, s),
			stat(results.TTFT, s, results.StatMedian), stat(results.TTFT, s, results.StatP99),
			stat(results.TPOT, s, results.StatMedian), stat(results.TPOT, s, results.StatP99), s.Verdict)
	}
	fmt.Fprintln(w, "latencies in ms; each run's summary_A.json is in its directory of --out")
}
