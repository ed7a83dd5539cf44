package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/openloop/stub"
	"github.com/urfave/cli/v2"
)

// benchLoadCommand is the bench-load command.
func benchLoadCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench-load",
		Usage: "measure the load generator against a realistic stub in a process of its own on 127.0.0.1",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "rates", Value: "500,1000,2000,4000", Usage: "comma-separated Poisson rates (req/s)"},
			&cli.DurationFlag{Name: "duration", Value: 3 * time.Second, Usage: "measured time per run"},
			&cli.IntFlag{Name: "runs", Value: 5, Usage: "runs per rate, the rates interleaved"},
			&cli.DurationFlag{Name: "first-token", Value: openloop.RealisticStub.FirstToken, Usage: "stub: arrival to first token"},
			&cli.DurationFlag{Name: "gap", Value: openloop.RealisticStub.Gap, Usage: "stub: between tokens (each flushed on its own)"},
			&cli.IntFlag{Name: "tokens", Value: openloop.RealisticStub.Tokens, Usage: "stub: tokens per request"},
			formatFlag("text", "json"), formatAlias("json", "json"),
		},
		Action: benchLoadAction,
	}

}

// benchStubCommand is the bench-stub command.
func benchStubCommand() *cli.Command {
	return &cli.Command{
		Name:   "bench-stub",
		Usage:  "the stub server of bench-load (started by it; serves until stdin closes)",
		Hidden: true,
		Action: func(c *cli.Context) error { return stub.ServeProcess(os.Stdin, c.App.Writer) },
	}

}

func benchLoadAction(c *cli.Context) error {
	format, err := outputFormat(c, "bench-load", []string{"text", "json"}, map[string]string{"json": "json"})
	if err != nil {
		return err
	}
	rates, err := parseRates("bench-load", "--rates", c.String("rates"))
	if err != nil {
		return err
	}
	runs, tokens := c.Int("runs"), c.Int("tokens")
	if runs < 1 || tokens < 1 || c.Duration("duration") <= 0 || c.Duration("first-token") < 0 || c.Duration("gap") < 0 {
		return usageError{fmt.Errorf("bench-load: --runs, --tokens and --duration must be > 0, --first-token and --gap ≥ 0")}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench-load: %w", err)
	}
	opts := stub.Options{Tokens: tokens, FirstToken: c.Duration("first-token"), Gap: c.Duration("gap")}
	p, err := stub.StartProcess(c.Context, []string{exe, "bench-stub"}, opts)
	if err != nil {
		return fmt.Errorf("bench-load: %w", err)
	}
	defer p.Close()
	tgt := openloop.PrecisionTarget{URL: p.URL, Reset: p.Reset, Entries: p.Entries, CPU: p.CPUSeconds, Output: tokens}
	w := c.App.Writer
	if format == "json" { // stdout carries the JSON alone; the table goes to stderr as the runs end
		w = c.App.ErrWriter
	}
	fmt.Fprintf(w, "stub: separate process, %d tokens each flushed alone, first after %v, then every %v; prompts of %d tokens; Poisson; %v per run\n",
		tokens, opts.FirstToken, opts.Gap, openloop.PrecisionInput, c.Duration("duration"))
	openloop.WritePrecisionHeader(w)
	var rows []openloop.PrecisionRow
	holds := map[float64]int{}
	for range runs {
		for _, rate := range rates {
			row, err := openloop.MeasurePrecisionAgainst(c.Context, tgt, rate, c.Duration("duration"))
			if err != nil {
				return fmt.Errorf("bench-load: %w", err)
			}
			openloop.WritePrecisionRow(w, row)
			rows = append(rows, row)
			if row.Holds {
				holds[rate]++
			}
		}
	}
	need := int(math.Ceil(0.8 * float64(runs)))
	best := 0.0
	for _, rate := range rates {
		fmt.Fprintf(w, "rate %g: holds in %d of %d runs\n", rate, holds[rate], runs)
		if holds[rate] >= need && rate > best {
			best = rate
		}
	}
	fmt.Fprintf(w, "highest rate holding achieved/offered >= %.2f and lag p99 <= %.0f ms in >= %d of %d runs: %g req/s\n",
		openloop.PrecisionMinRatio, openloop.PrecisionMaxLagP99Ms, need, runs, best)
	if format == "json" {
		return json.NewEncoder(c.App.Writer).Encode(rows)
	}
	return nil
}
