package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// loadProgressEvery is how often a load run writes a progress line when
// stderr is not a terminal.
const loadProgressEvery = 5 * time.Second

// loadProgress shows a load run going: a bar on a terminal (requests
// done, in flight, rate, ETA), a line every few seconds off one, nothing
// with --disable-tqdm.
type loadProgress struct {
	mu    sync.Mutex
	w     io.Writer
	bar   *progressbar.ProgressBar
	off   bool
	total int // requests to send, warmup included (0: unknown, a duration or trace)
	last  time.Duration
	p     openloop.Progress
}

func newLoadProgress(w io.Writer, lr *loadRun, disabled bool) *loadProgress {
	p := &loadProgress{w: w, off: disabled, last: -loadProgressEvery}
	if lr.cfg.Requests > 0 && lr.cfg.Duration == 0 && lr.cfg.MinCompleted == 0 {
		p.total = lr.cfg.Requests + lr.cfg.Warmup
	}
	if disabled {
		return p
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(cmp.Or(p.total, -1), // -1: a spinner
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("load"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("req"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(24),
			progressbar.OptionFullWidth(),
			progressbar.OptionThrottle(100*time.Millisecond),
		)
	}
	return p
}

// update is the load generator's Config.Progress.
func (p *loadProgress) update(s openloop.Progress) {
	if p.off {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p = s
	done := s.Completed + s.Failed
	if p.bar != nil {
		p.bar.Describe(fmt.Sprintf("%s: %d in flight, %d failed", s.Phase, s.Inflight, s.Failed))
		_ = p.bar.Set(done)
		return
	}
	if s.Elapsed-p.last < loadProgressEvery && s.Phase != "done" {
		return
	}
	p.last = s.Elapsed
	fmt.Fprintln(p.w, progressLine(s, p.total))
}

// progressLine is one progress line: phase, requests done of the total,
// failures, in flight, the completion rate and, with a total, the ETA.
func progressLine(s openloop.Progress, total int) string {
	done := s.Completed + s.Failed
	var b strings.Builder
	fmt.Fprintf(&b, "load: [%s] %d", s.Phase, done)
	if total > 0 {
		fmt.Fprintf(&b, "/%d", total)
	}
	fmt.Fprintf(&b, " requests done (%d failed), %d in flight", s.Failed, s.Inflight)
	if sec := s.Elapsed.Seconds(); sec > 0 {
		rate := float64(done) / sec
		fmt.Fprintf(&b, ", %.1f req/s, %s elapsed", rate, s.Elapsed.Round(time.Second))
		if total > 0 && rate > 0 && done < total {
			fmt.Fprintf(&b, ", ETA %s", time.Duration(float64(total-done)/rate*float64(time.Second)).Round(time.Second))
		}
	}
	return b.String()
}

// finish ends the bar (its last state stays on the terminal).
func (p *loadProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
	}
}

// writeSummaryTable writes vllm bench serve's "Serving Benchmark Result"
// table (its rows and labels; serve.py's benchmark()), then mbench's
// verdict in one line.
func writeSummaryTable(w io.Writer, lr *loadRun, sum *results.RunSummary, doc *loadDoc) {
	v := map[string]any{}
	for _, e := range doc.vllm {
		v[e.k] = e.v
	}
	row := func(label string, val any) {
		switch x := val.(type) {
		case float64:
			fmt.Fprintf(w, "%-40s %-10.2f\n", label, x)
		case *float64:
			if x == nil {
				fmt.Fprintf(w, "%-40s %-10s\n", label, "n/a")
			} else {
				fmt.Fprintf(w, "%-40s %-10.2f\n", label, *x)
			}
		default:
			fmt.Fprintf(w, "%-40s %-10v\n", label, x)
		}
	}
	metric := func(label string, m results.Metric) { // a count as an integer, as vLLM prints it
		switch v, ok := m.Value(sum); {
		case ok && (m.Unit == results.UnitCount || m.Unit == results.UnitTokens):
			row(label, int64(v))
		case ok:
			row(label, v)
		}
	}
	fmt.Fprintf(w, "%s\n", center(" Serving Benchmark Result ", 50, '='))
	if lr.simulated {
		row("Engine:", "simulated (mbench sim)")
	}
	metric("Successful requests:", results.Completed)
	metric("Failed requests:", results.Failed)
	if mc := v["max_concurrency"]; mc != nil {
		row("Maximum request concurrency:", mc)
	}
	if r, ok := lr.rate.(float64); ok && !math.IsInf(r, 0) && lr.cfg.Arrival.Process != openloop.ArrivalConcurrency {
		row("Request rate configured (RPS):", r)
	}
	metric("Benchmark duration (s):", results.Duration)
	metric("Total input tokens:", results.TotalInputTokens)
	metric("Total generated tokens:", results.TotalOutputTokens)
	metric("Request throughput (req/s):", results.RequestThroughput)
	metric("Request goodput (req/s):", results.Goodput)
	metric("Output token throughput (tok/s):", results.OutputThroughput)
	row("Peak output token throughput (tok/s):", v["max_output_tokens_per_s"])
	row("Peak concurrent requests:", float64(v["max_concurrent_requests"].(int)))
	row("Total token throughput (tok/s):", v["total_token_throughput"])
	headers := map[string][2]string{
		"ttft": {"Time to First Token", "TTFT"},
		"tpot": {"Time per Output Token (excl. 1st token)", "TPOT"},
		"itl":  {"Inter-token Latency", "ITL"},
		"e2el": {"End-to-end Latency", "E2EL"},
	}
	for _, m := range lr.metrics {
		h := headers[m]
		fmt.Fprintf(w, "%s\n", center(h[0], 50, '-'))
		l, _ := results.LatencyNamed(m)
		row("Mean "+h[1]+" (ms):", l.Stat(sum, results.StatMean))
		row("Median "+h[1]+" (ms):", l.Stat(sum, results.StatMedian))
		for _, p := range lr.pcts {
			row(fmt.Sprintf("P%s %s (ms):", strconv.FormatFloat(p, 'f', -1, 64), h[1]), l.Stat(sum, results.PercentileStat(p)))
		}
	}
	fmt.Fprintf(w, "%s\n", strings.Repeat("=", 50))
	fmt.Fprintln(w, verdictLine(sum))
}

// verdictLine is mbench's verdict in one line, with the server's own words
// for the first failure of each kind.
func verdictLine(sum *results.RunSummary) string {
	line := fmt.Sprintf("verdict: %s", sum.Verdict)
	if len(sum.VerdictReasons) > 0 {
		line += " (" + loadTerms(strings.Join(sum.VerdictReasons, "; ")) + ")"
	}
	for _, k := range slices.Sorted(maps.Keys(sum.Errors)) {
		ex := sum.ErrorExamples[k]
		if len(ex) > 200 {
			ex = ex[:200] + "…"
		}
		line += fmt.Sprintf("\nfailed: %d %s", sum.Errors[k], k)
		if ex != "" {
			line += ": " + ex
		}
	}
	return line
}

// center is s centred in a line of n c's, as Python's "{s:{c}^{n}}".
func center(s string, n int, c rune) string {
	pad := n - len([]rune(s))
	if pad <= 0 {
		return s
	}
	l := pad / 2
	return strings.Repeat(string(c), l) + s + strings.Repeat(string(c), pad-l)
}
