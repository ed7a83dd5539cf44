package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/orchestrator"
	"github.com/mbench/mbench/results"
	"github.com/urfave/cli/v2"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:  "load",
			Usage: "one open-loop run against any OpenAI-compatible endpoint; writes requests.jsonl and summary_A.json",
			Flags: []cli.Flag{
				&cli.StringSliceFlag{Name: "url", Usage: "base URL of the endpoint (repeat to round-robin)", Required: true},
				&cli.Float64Flag{Name: "rate", Usage: "offered request rate (req/s)", Required: true},
				&cli.IntFlag{Name: "input", Usage: "prompt length in tokens"},
				&cli.IntFlag{Name: "output", Usage: "output tokens per request (max_tokens = min_tokens, ignore_eos)"},
				&cli.IntFlag{Name: "requests", Usage: "measured requests to send"},
				&cli.DurationFlag{Name: "duration", Usage: "send for this long"},
				&cli.IntFlag{Name: "min-completed", Usage: "measure until this many requests completed"},
				&cli.IntFlag{Name: "warmup", Usage: "warmup requests, discarded"},
				&cli.Int64Flag{Name: "seed", Value: 1, Usage: "workload seed"},
				&cli.StringFlag{Name: "model", Usage: "model name (default: the first of /v1/models)"},
				&cli.StringFlag{Name: "arrival", Value: openloop.ArrivalPoisson, Usage: strings.Join(openloop.ArrivalProcesses, " | ")},
				&cli.Float64Flag{Name: "burstiness", Value: 1, Usage: "gamma shape b (gaps ~ Gamma(b, 1/(rate·b)))"},
				&cli.StringFlag{Name: "trace", Usage: "replay a Mooncake-format trace (rate becomes a multiplier)"},
				&cli.Float64Flag{Name: "time-scale", Value: 1, Usage: "trace time compression"},
				&cli.IntFlag{Name: "request-limit", Usage: "trace: at most this many requests"},
				&cli.IntFlag{Name: "max-inflight-sessions", Usage: "trace: sessions in flight at once (0 = unlimited)"},
				&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "cap on the measured phase"},
				&cli.DurationFlag{Name: "drain-timeout", Value: time.Minute, Usage: "wait this long for in-flight requests after sending stops"},
				&cli.DurationFlag{Name: "request-timeout", Usage: "fail a request (error class timeout) that runs longer than this (0 = none)"},
				&cli.StringFlag{Name: "request-id-prefix", Usage: "start of every X-Request-Id (default mbench-<random>-)"},
				&cli.Float64Flag{Name: "max-failed", Value: results.DefaultMaxErrorRate, Usage: "exit 3 when more than this share of the measured requests failed"},
				&cli.StringFlag{Name: "slo", Usage: "per-request SLO for goodput and SLO attainment in summary_A.json: ttft_ms=MS,tpot_ms=MS,e2el_ms=MS (any subset; vllm's ttft:MS form too)"},
				&cli.StringFlag{Name: "out", Usage: "directory for requests.jsonl and summary_A.json", Required: true},
			},
			Action: loadAction,
		}
	})
}

func loadAction(c *cli.Context) error {
	shape := openloop.Shape{Input: c.Int("input"), Output: c.Int("output")}
	shape.Name = fmt.Sprintf("%dx%d", shape.Input, shape.Output)
	if p := c.String("trace"); p != "" {
		shape = openloop.Shape{Name: filepath.Base(p), Trace: &openloop.Trace{Path: p, TimeScale: c.Float64("time-scale"),
			RequestLimit: c.Int("request-limit"), MaxInflightSessions: c.Int("max-inflight-sessions")}}
	} else if shape.Input <= 0 || shape.Output <= 0 {
		return usageError{errors.New("load: --input and --output must be positive (or give --trace)")}
	}
	if err := checkRate("load", "--rate", c.Float64("rate")); err != nil {
		return err
	}
	if mf := c.Float64("max-failed"); !(mf >= 0 && mf <= 1) {
		return usageError{fmt.Errorf("load: --max-failed %v: must be a share between 0 and 1", mf)}
	}
	if c.Duration("request-timeout") < 0 {
		return usageError{fmt.Errorf("load: --request-timeout %v: must be ≥ 0", c.Duration("request-timeout"))}
	}
	slo, err := parseSLOFlag(c.String("slo"))
	if err != nil {
		return usageError{fmt.Errorf("load: %w", err)}
	}
	n, d, mc := c.Int("requests"), c.Duration("duration"), c.Int("min-completed")
	if shape.Trace == nil && n <= 0 && d <= 0 && mc <= 0 {
		return usageError{errors.New("load: give one of --requests N, --duration D or --min-completed N")}
	}
	if a := c.String("arrival"); a == "" || !openloop.ValidProcess(a) {
		return usageError{fmt.Errorf("load: --arrival %q: valid: %s", a, strings.Join(openloop.ArrivalProcesses, ", "))}
	}
	out := c.String("out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("load: create %s: %w", out, err)
	}
	f, err := os.Create(filepath.Join(out, "requests.jsonl"))
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer f.Close()
	cfg := openloop.Config{
		Targets: c.StringSlice("url"), Model: c.String("model"), Rate: c.Float64("rate"),
		Arrival: openloop.Arrival{Process: c.String("arrival"), Burstiness: c.Float64("burstiness")},
		Shape:   shape, Seed: c.Int64("seed"), Warmup: c.Int("warmup"), MinCompleted: mc, Requests: n, Duration: d,
		Timeout: c.Duration("timeout"), DrainTimeout: c.Duration("drain-timeout"), Cell: "load", Sink: f,
		RequestTimeout: c.Duration("request-timeout"), RequestIDPrefix: c.String("request-id-prefix"),
	}
	arrival := cfg.Arrival.Process
	if shape.Trace != nil {
		arrival = "trace"
	}
	res, runErr := openloop.Run(c.Context, cfg)
	if res == nil {
		if errors.Is(runErr, openloop.ErrModelLookup) {
			return noResultError{fmt.Errorf("load: %w", runErr)}
		}
		return fmt.Errorf("load: %w", runErr)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("load: write requests.jsonl: %w", err)
	}
	// Every request of a --requests N run must complete; a --min-completed
	// run must reach its minimum; the verdict is the sweep's (results.Decide).
	policy := results.Policy{MinCompleted: max(mc, n), MaxErrorRate: c.Float64("max-failed"), MaxErrorRateSet: true, SLO: slo}
	sum, err := results.SummarizeRun(results.RunInput{
		Cell: "load", Config: "load", Shape: shape.Name, Rate: cfg.Rate, Engine: "external",
		Arrival: arrival, Burstiness: cfg.Arrival.Burstiness, Policy: policy,
	}.WithLoad(res))
	if err != nil {
		return fmt.Errorf("load: summarize: %w", err)
	}
	data, err := results.WriteRunSummaryBytes(filepath.Join(out, "summary_A.json"), sum)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if _, err := c.App.Writer.Write(data); err != nil {
		return err
	}
	return loadOutcome(sum, runErr)
}

// loadOutcome is the exit status of a finished run: nil when its verdict
// is ok.
func loadOutcome(sum *results.RunSummary, runErr error) error {
	if runErr != nil {
		if errors.Is(runErr, context.Canceled) {
			return fmt.Errorf("load: %w (requests.jsonl and summary_A.json hold what was measured)", orchestrator.ErrInterrupted)
		}
		return fmt.Errorf("load: %w", runErr)
	}
	if sum.Verdict.Usable() {
		return nil
	}
	return noResultError{fmt.Errorf("load: the run is not a result: %s", strings.Join(sum.VerdictReasons, "; "))}
}
