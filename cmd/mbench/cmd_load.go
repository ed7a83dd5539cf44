package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"github.com/urfave/cli/v2"
)

// loadCommand is the load command: vllm bench serve's command line (its
// flags under vLLM's names, beside mbench's own; load_flags.go), one run,
// a summary table, summary_A.json with vLLM's result keys.
func loadCommand() *cli.Command {
	return &cli.Command{
		Name:      "load",
		Usage:     "one run against any OpenAI-compatible endpoint, as vllm bench serve: a summary table on stdout; requests.jsonl and summary_A.json in --out",
		UsageText: "mbench load [--base-url URL | --host H --port P] [--model M] [--dataset-name random --random-input-len N --random-output-len N] [--request-rate R | --concurrency N] [--num-prompts N] [--save-result] …",
		Flags:     loadFlags(),
		Action:    loadAction,
	}
}

func loadAction(c *cli.Context) error {
	typed := loadTyped(c, typedNames(c.Args().Slice()))
	lr, err := loadSpec(c, typed)
	if err != nil {
		return err
	}
	// A summary left by an earlier run in this --out would pass for this
	// run's when this one ends without a summary (no model, an error).
	if err := os.Remove(filepath.Join(lr.out, "summary_A.json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("load: remove the earlier run's summary_A.json: %w", err)
	}
	pre, err := preflight(c.Context, lr)
	if err != nil {
		return err
	}
	lr.simulated = pre.simulated
	if lr.sweepRates > 0 {
		return loadSweep(c, lr)
	}
	sum, doc, runErr, err := runLoad(c, lr)
	if err != nil {
		return err
	}
	if c.String("format") == "json" {
		if _, err := c.App.Writer.Write(doc.summary); err != nil {
			return err
		}
	} else {
		writeSummaryTable(c.App.Writer, lr, sum, doc)
	}
	return loadOutcome(sum, runErr)
}

// runLoad runs one load and writes its files in lr.out; runErr is the load
// generator's (a cancelled run still has a summary), err a run without one.
func runLoad(c *cli.Context, lr *loadRun) (sum *results.RunSummary, doc *loadDoc, runErr, err error) {
	out := lr.out
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, nil, nil, fmt.Errorf("load: create --out %s: %w", out, err)
	}
	f, err := os.Create(filepath.Join(out, "requests.jsonl"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load: %w", err)
	}
	defer f.Close()
	cfg := lr.cfg
	cfg.Sink = f
	prog := newLoadProgress(c.App.ErrWriter, lr, c.Bool("disable-tqdm"))
	cfg.Progress = prog.update
	scr := newMetricsScrape(c.Context, lr, c.App.ErrWriter)
	cfg.OnPhase = scr.onPhase
	res, runErr := openloop.Run(c.Context, cfg)
	prog.finish()
	if res == nil {
		scr.summary()
		switch {
		case errors.Is(runErr, context.Canceled):
			return nil, nil, nil, fmt.Errorf("load: %w before the first request: nothing was measured", errLoadInterrupted)
		case errors.Is(runErr, openloop.ErrTokenRange): // --token-ids (or the default) does not fit the engine's vocabulary
			return nil, nil, nil, usageError{fmt.Errorf("load: %w", runErr)}
		case errors.Is(runErr, openloop.ErrModelLookup):
			return nil, nil, nil, noResultError{fmt.Errorf("load: %w (give --model)", runErr)}
		}
		return nil, nil, nil, fmt.Errorf("load: %w", runErr)
	}
	if err := f.Sync(); err != nil {
		return nil, nil, nil, fmt.Errorf("load: write requests.jsonl: %w", err)
	}
	if cfg.Shape.Trace != nil || cfg.Shape.Dataset == nil {
		fmt.Fprintf(c.App.ErrWriter, "load: prompt token ids %v (%s)\n", res.TokenIDs, res.TokenSource)
	}
	sum, err = results.SummarizeRun(results.RunInput{
		Cell: "load", Config: "load", Shape: cfg.Shape.Name, Rate: rateLabel(cfg), Engine: lr.engine(),
		Simulated: lr.simulated, Arrival: lr.arrivalName(), Burstiness: cfg.Arrival.Burstiness, Policy: lr.policy,
		Percentiles: lr.pcts, NaturalLength: cfg.Request.NaturalLength, Label: lr.label, Metadata: lr.meta,
		Cache: scr.summary(),
	}.WithLoad(res))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load: summarize: %w", err)
	}
	if doc, err = writeLoadResult(lr, sum, res); err != nil {
		return nil, nil, nil, err
	}
	fmt.Fprintf(c.App.ErrWriter, "load: wrote %s and requests.jsonl", filepath.Join(out, "summary_A.json"))
	if doc.savedPath != "" {
		fmt.Fprintf(c.App.ErrWriter, ", and %s", doc.savedPath)
	}
	fmt.Fprintln(c.App.ErrWriter)
	return sum, doc, runErr, nil
}

// errLoadInterrupted is a load run stopped by Ctrl-C (exit 130).
var errLoadInterrupted = interruptedError{errors.New("interrupted")}

// interruptedError exits as an interrupted command does.
type interruptedError struct{ error }

func (interruptedError) ExitCode() int { return exitInterrupted }

// loadOutcome is the exit status of a finished run: nil when its verdict
// is ok.
func loadOutcome(sum *results.RunSummary, runErr error) error {
	if runErr != nil {
		if errors.Is(runErr, context.Canceled) {
			done, _ := results.Completed.Value(sum)
			failed, _ := results.Failed.Value(sum)
			return fmt.Errorf("load: %w: the load stopped; requests.jsonl and summary_A.json hold the %.0f requests measured so far (not a result)", errLoadInterrupted, done+failed)
		}
		return fmt.Errorf("load: %w", runErr)
	}
	if sum.Verdict.Usable() {
		return nil
	}
	return noResultError{fmt.Errorf("load: the run is not a result: %s", loadTerms(strings.Join(sum.VerdictReasons, "; ")))}
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

// loadTyped adds the flag names of the command line being run (os.Args in
// the binary, the arguments run was given in tests) to typed.
func loadTyped(c *cli.Context, typed typedFlags) typedFlags {
	if args, ok := c.Context.Value(argsKey{}).([]string); ok {
		maps.Copy(typed, typedNames(args))
	}
	return typed
}

// argsKey carries run's arguments in its context, for messages that name
// a flag as it was typed.
type argsKey struct{}

// loadTerms says a verdict's reasons in mbench load's flags, not the
// matrix's keys.
func loadTerms(s string) string {
	return strings.NewReplacer("max_error_rate", "--max-failed", "measure.drain_timeout", "--drain-timeout",
		"measure.min_completed", "--min-completed", "min_completed", "--min-completed").Replace(s)
}
