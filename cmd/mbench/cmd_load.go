package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/orchestrator"
	"github.com/mbench/mbench/results"
	"github.com/mbench/mbench/results/sweepdir"
	"github.com/urfave/cli/v2"
)

// loadCommand is the load command.
func loadCommand() *cli.Command {
	return &cli.Command{
		Name:  "load",
		Usage: "one open-loop run against any OpenAI-compatible endpoint; writes requests.jsonl and summary_A.json",
		Flags: append([]cli.Flag{
			&cli.StringSliceFlag{Name: "url", Usage: "base URL of the endpoint (repeat to round-robin)", Required: true},
			&cli.Float64Flag{Name: "rate", Usage: "offered request rate (req/s), or inf: every request at once (a burst; needs --requests); required unless --concurrency"},
			&cli.IntFlag{Name: "concurrency", Usage: "closed loop: keep N requests in flight, a new one sent as one finishes (instead of --rate)"},
			&cli.IntFlag{Name: "input", Usage: "prompt length in tokens"},
			&cli.IntFlag{Name: "output", Usage: "output tokens per request (max_tokens = min_tokens, ignore_eos)"},
			&cli.IntFlag{Name: "requests", Usage: "measured requests to send"},
			&cli.DurationFlag{Name: "duration", Usage: "send for this long"},
			&cli.IntFlag{Name: "min-completed", Usage: "measure until this many requests completed"},
			&cli.IntFlag{Name: "warmup", Usage: "warmup requests, discarded"},
			&cli.Int64Flag{Name: "seed", Value: 1, Usage: "workload seed"},
			&cli.StringFlag{Name: "model", Usage: "model name (default: the first of /v1/models)"},
			&cli.StringFlag{Name: "token-ids", Usage: "prompt token ids drawn from MIN:MAX (half-open; default: 1000:31000, cut to the vocabulary where /v1/models says its size)"},
			&cli.StringFlag{Name: "endpoint", Value: string(openloop.EndpointCompletions), Usage: "completions (/v1/completions) | chat (/v1/chat/completions)"},
			&cli.StringFlag{Name: "arrival", Value: openloop.ArrivalPoisson, Usage: strings.Join(openloop.ArrivalProcesses, " | ")},
			&cli.Float64Flag{Name: "burstiness", Value: 1, Usage: "gamma shape b (gaps ~ Gamma(b, 1/(rate·b)))"},
			&cli.StringFlag{Name: "ramp", Usage: "ramp the rate up over --ramp-duration: linear | exponential"},
			&cli.Float64Flag{Name: "ramp-from", Usage: "ramp: the rate at the start (req/s)"},
			&cli.DurationFlag{Name: "ramp-duration", Usage: "ramp: how long the rate takes to reach --rate"},
			&cli.BoolFlag{Name: "include-ramp", Usage: "ramp: measure the ramp's requests too (default: phase ramp, not measured)"},
			&cli.StringFlag{Name: "trace", Usage: "replay a Mooncake-format trace (rate becomes a multiplier)"},
			&cli.StringFlag{Name: "dataset", Usage: "prompts from a file, sampled with --seed (--output, when set, overrides its output lengths)"},
			&cli.StringFlag{Name: "dataset-format", Usage: "sharegpt | jsonl (default: by extension, .json sharegpt, .jsonl jsonl)"},
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
		}, requestFlags()...),
		Action: loadAction,
	}

}

func loadAction(c *cli.Context) error {
	shape := openloop.Shape{Input: c.Int("input"), Output: c.Int("output")}
	shape.Name = fmt.Sprintf("%dx%d", shape.Input, shape.Output)
	if ts := c.Float64("time-scale"); !(ts > 0) || math.IsInf(ts, 0) {
		return usageError{fmt.Errorf("load: --time-scale %v: must be a finite number > 0 (2 replays the trace twice as fast)", ts)}
	}
	if p := c.String("trace"); p != "" {
		shape = openloop.Shape{Name: filepath.Base(p), Trace: &openloop.Trace{Path: p, TimeScale: c.Float64("time-scale"),
			RequestLimit: c.Int("request-limit"), MaxInflightSessions: c.Int("max-inflight-sessions")}}
	} else if p := c.String("dataset"); p != "" {
		ds, err := datasetFlag(p, c.String("dataset-format"))
		if err != nil {
			return err
		}
		if c.IsSet("input") {
			return usageError{errors.New("load: --input does not apply to --dataset (the prompts come from the file)")}
		}
		shape = openloop.Shape{Name: strings.TrimSuffix(filepath.Base(p), filepath.Ext(p)), Output: c.Int("output"), Dataset: ds}
	} else if shape.Input <= 0 || shape.Output <= 0 {
		return usageError{errors.New("load: --input and --output must be positive (or give --trace or --dataset)")}
	}
	inFlight := c.Int("concurrency")
	switch {
	case c.IsSet("concurrency") && c.IsSet("rate"):
		return usageError{errors.New("load: --rate or --concurrency, not both (a closed loop has no rate)")}
	case c.IsSet("concurrency") && inFlight < 1:
		return usageError{fmt.Errorf("load: --concurrency %d: must be ≥ 1", inFlight)}
	case c.IsSet("concurrency") && c.IsSet("max-concurrency"):
		return usageError{errors.New("load: --max-concurrency caps a rate; a closed loop (--concurrency) already keeps its N in flight")}
	case c.IsSet("max-concurrency") && c.Int("max-concurrency") < 1:
		return usageError{fmt.Errorf("load: --max-concurrency %d: must be ≥ 1", c.Int("max-concurrency"))}
	case math.IsInf(c.Float64("rate"), 1):
		if c.Int("requests") <= 0 || c.IsSet("duration") || c.IsSet("min-completed") {
			return usageError{errors.New("load: --rate inf sends every request at once: give --requests N (not --duration or --min-completed)")}
		}
	case !c.IsSet("concurrency"):
		if err := checkRate("load", "--rate", c.Float64("rate")); err != nil {
			return err
		}
	}
	req, err := requestFromFlags(c)
	if err != nil {
		return err
	}
	pcts, meta, err := recordFlags(c)
	if err != nil {
		return err
	}
	model, err := modelFlag(c)
	if err != nil {
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
	if a := c.String("arrival"); a == openloop.ArrivalConcurrency {
		return usageError{errors.New("load: --arrival concurrency: give --concurrency N")}
	} else if a == "" || !openloop.ValidProcess(a) {
		return usageError{fmt.Errorf("load: --arrival %q: valid: %s", a, strings.Join(openloop.ArrivalProcesses, ", "))}
	}
	if err := openloop.Endpoint(c.String("endpoint")).Validate(); err != nil {
		return usageError{fmt.Errorf("load: --%w", err)}
	}
	arr, err := arrivalFlags(c, inFlight)
	if err != nil {
		return err
	}
	arr.MaxInFlight = c.Int("max-concurrency")
	var tokens openloop.TokenRange
	if s := c.String("token-ids"); s != "" {
		if tokens, err = openloop.ParseTokenRange(s); err != nil {
			return usageError{fmt.Errorf("load: --token-ids: %w", err)}
		}
	}
	out := c.String("out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("load: create %s: %w", out, err)
	}
	// A summary left by an earlier run in this --out would pass for this
	// run's when this one ends without a summary (no model, an error).
	if err := os.Remove(filepath.Join(out, "summary_A.json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("load: remove the earlier run's summary_A.json: %w", err)
	}
	f, err := os.Create(filepath.Join(out, "requests.jsonl"))
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer f.Close()
	cfg := openloop.Config{
		Targets: c.StringSlice("url"), Model: model, TokenIDs: tokens, Rate: c.Float64("rate"), Endpoint: openloop.Endpoint(c.String("endpoint")), Request: req,
		Arrival: arr, IncludeRamp: c.Bool("include-ramp"),
		Shape: shape, Seed: c.Int64("seed"), Warmup: c.Int("warmup"), MinCompleted: mc, Requests: n, Duration: d,
		Timeout: c.Duration("timeout"), DrainTimeout: c.Duration("drain-timeout"), Cell: "load", Sink: f,
		RequestTimeout: c.Duration("request-timeout"), RequestIDPrefix: c.String("request-id-prefix"),
	}
	arrival := cfg.Arrival.Process
	switch {
	case shape.Trace != nil:
		arrival = "trace"
	case math.IsInf(cfg.Rate, 1):
		arrival = "burst"
	}
	res, runErr := openloop.Run(c.Context, cfg)
	if res == nil {
		if errors.Is(runErr, openloop.ErrTokenRange) { // --token-ids (or the default) does not fit the engine's vocabulary
			return usageError{fmt.Errorf("load: %w", runErr)}
		}
		if errors.Is(runErr, openloop.ErrModelLookup) {
			return noResultError{fmt.Errorf("load: %w", runErr)}
		}
		return fmt.Errorf("load: %w", runErr)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("load: write requests.jsonl: %w", err)
	}
	if shape.Trace != nil || shape.Dataset == nil {
		fmt.Fprintf(c.App.ErrWriter, "load: prompt token ids %v (%s)\n", res.TokenIDs, res.TokenSource)
	}
	// Every request of a --requests N run must finish on its own merits
	// (completed, or failed within --max-failed); a --min-completed run must
	// reach its minimum; the verdict is the sweep's (results.Decide).
	policy := results.Policy{MinCompleted: mc, Requests: n, MaxErrorRate: c.Float64("max-failed"), MaxErrorRateSet: true, SLO: slo}
	sum, err := results.SummarizeRun(results.RunInput{
		Cell: "load", Config: "load", Shape: shape.Name, Rate: rateLabel(cfg), Engine: "external",
		Arrival: arrival, Burstiness: cfg.Arrival.Burstiness, Policy: policy,
		Percentiles: pcts, NaturalLength: req.NaturalLength, Label: c.String("label"), Metadata: meta,
	}.WithLoad(res))
	if err != nil {
		return fmt.Errorf("load: summarize: %w", err)
	}
	data, err := sweepdir.WriteRunSummaryBytes(filepath.Join(out, "summary_A.json"), sum)
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

// rateLabel is the run's rate as a summary names it: the offered rate, a
// closed loop's in-flight level (as a sweep's cells name it), or 0 for a
// burst (arrival "burst": every request at once; JSON has no infinity).
func rateLabel(cfg openloop.Config) float64 {
	switch {
	case cfg.Arrival.Process == openloop.ArrivalConcurrency:
		return float64(cfg.Arrival.InFlight)
	case math.IsInf(cfg.Rate, 1):
		return 0
	}
	return cfg.Rate
}

// datasetFlag is the --dataset file with its format, given or by extension.
func datasetFlag(path, format string) (*openloop.Dataset, error) {
	if format == "" {
		switch filepath.Ext(path) {
		case ".json":
			format = string(openloop.DatasetShareGPT)
		case ".jsonl":
			format = string(openloop.DatasetJSONL)
		default:
			return nil, usageError{fmt.Errorf("load: --dataset %s: give --dataset-format sharegpt or jsonl", path)}
		}
	}
	ds := &openloop.Dataset{Path: path, Format: openloop.DatasetFormat(format)}
	if err := ds.Validate(); err != nil {
		return nil, usageError{fmt.Errorf("load: --%w", err)}
	}
	return ds, nil
}

// arrivalFlags is the arrival the flags ask for: --arrival and --burstiness,
// or the closed loop of --concurrency, with the --ramp options.
func arrivalFlags(c *cli.Context, inFlight int) (openloop.Arrival, error) {
	a := openloop.Arrival{Process: c.String("arrival"), Burstiness: c.Float64("burstiness")}
	if c.IsSet("burstiness") && a.Process != openloop.ArrivalGamma {
		// vllm bench serve's --burstiness shapes its gamma gaps; here the
		// process is named, and a burstiness beside another one would be
		// dropped without a word.
		return a, usageError{fmt.Errorf("load: --burstiness %g shapes gamma arrivals: give --arrival gamma (poisson is gamma with burstiness 1), not --arrival %s", a.Burstiness, a.Process)}
	}
	if inFlight > 0 {
		a = openloop.Arrival{Process: openloop.ArrivalConcurrency, InFlight: inFlight}
	}
	if k := c.String("ramp"); k != "" {
		a.Ramp = &openloop.Ramp{Kind: openloop.RampKind(k), From: c.Float64("ramp-from"), Duration: c.Duration("ramp-duration")}
	} else if c.Bool("include-ramp") {
		return a, usageError{errors.New("load: --include-ramp needs --ramp")}
	}
	if err := a.Validate(); err != nil {
		return a, usageError{fmt.Errorf("load: --%w", err)}
	}
	return a, nil
}
