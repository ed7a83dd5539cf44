package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/jedib0t/go-pretty/v6/text"
	"github.com/mbench/mbench/probes"
	"github.com/urfave/cli/v2"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "steps",
			Usage:     "summarize engine_step.jsonl files: n_steps and percentiles of every timer",
			ArgsUsage: "FILE...",
			Description: "Prints one row per step log (seed-000 style). A timer the log never measured is\n" +
				"shown as — (absent), never as 0. Worker files <log>.worker.<pid>.jsonl next to a\n" +
				"log are merged in for get_finished_us unless --no-workers. FILE may be gzipped (.gz).",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"},
				&cli.BoolFlag{Name: "markdown", Usage: "print the table as Markdown"},
				&cli.Int64Flag{Name: "from-us", Usage: "keep steps with ts_us ≥ this (µs since the epoch)"},
				&cli.Int64Flag{Name: "to-us", Usage: "keep steps with ts_us ≤ this"},
				&cli.BoolFlag{Name: "no-workers", Usage: "do not merge worker get_finished_us files"},
			},
			Action: stepsAction,
		}
	})
}

// stepsFile is one file's summary in --json output.
type stepsFile struct {
	File    string             `json:"file"`
	Steps   probes.StepStats   `json:"steps"`
	Workers *probes.MergeStats `json:"workers,omitempty"`
}

func stepsAction(c *cli.Context) error {
	files := c.Args().Slice()
	if len(files) == 0 {
		return usageError{errors.New("steps: give at least one engine_step.jsonl file")}
	}
	for _, f := range files {
		if strings.HasPrefix(f, "-") {
			return usageError{fmt.Errorf("steps: %q: flags go before the files", f)}
		}
	}
	from, to := c.Int64("from-us"), c.Int64("to-us")
	if from < 0 || to < 0 || (to != 0 && from > to) {
		return usageError{fmt.Errorf("steps: window --from-us %d --to-us %d is empty or negative", from, to)}
	}
	var out []stepsFile
	for _, f := range files {
		sf, err := summarizeStepFile(c.Context, f, from, to, !c.Bool("no-workers"))
		if err != nil {
			return err
		}
		out = append(out, sf)
	}
	if c.Bool("json") {
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintln(c.App.Writer, string(b))
		return nil
	}
	renderStepsTable(c.App.Writer, out, c.Bool("markdown"))
	return nil
}

func openMaybeGzip(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("steps: %w", err)
	}
	if !strings.HasSuffix(path, ".gz") {
		return f, nil
	}
	z, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("steps: %s: %w", path, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{z, f}, nil
}

func summarizeStepFile(ctx context.Context, path string, from, to int64, workers bool) (stepsFile, error) {
	sf := stepsFile{File: path}
	main, err := openMaybeGzip(path)
	if err != nil {
		return sf, err
	}
	defer main.Close()
	var r io.Reader = main
	var wpaths []string
	if workers {
		wpaths, _ = filepath.Glob(probes.WorkerLogGlob(strings.TrimSuffix(path, ".gz")))
	}
	if len(wpaths) > 0 {
		var ws []io.Reader
		for _, p := range wpaths {
			w, err := os.Open(p)
			if err != nil {
				return sf, fmt.Errorf("steps: %w", err)
			}
			defer w.Close()
			ws = append(ws, w)
		}
		pr, pw := io.Pipe()
		ms := new(probes.MergeStats)
		sf.Workers = ms
		go func() {
			st, err := probes.MergeWorkerTimings(ctx, main, ws, pw)
			*ms = st
			pw.CloseWithError(err)
		}()
		defer pr.Close()
		r = pr
	}
	st, err := probes.SummarizeSteps(ctx, r, from, to, nil)
	if err != nil {
		return sf, fmt.Errorf("steps: %s: %w", path, err)
	}
	sf.Steps = st
	return sf, nil
}

// cell formats one timer percentile: — when the timer was never measured.
func cell(st probes.StepStats, timer string, pick func(probes.Quantiles) float64) string {
	q, ok := st.Timers[timer]
	if !ok {
		return "—"
	}
	s := fmt.Sprintf("%.0f", pick(q))
	if q.Approx {
		s = "~" + s
	}
	return s
}

func renderStepsTable(w io.Writer, files []stepsFile, markdown bool) {
	p50 := func(q probes.Quantiles) float64 { return q.P50 }
	p90 := func(q probes.Quantiles) float64 { return q.P90 }
	p99 := func(q probes.Quantiles) float64 { return q.P99 }
	t := table.NewWriter()
	t.SetOutputMirror(w)
	t.AppendHeader(table.Row{"file", "n_steps", "step p50 µs", "step p90 µs", "step p99 µs",
		"build_meta p50", "build_meta p90", "get_finished p50", "unaccounted p50", "malformed"})
	for _, f := range files {
		st := f.Steps
		t.AppendRow(table.Row{f.File, st.NSteps,
			cell(st, "step_duration_us", p50), cell(st, "step_duration_us", p90), cell(st, "step_duration_us", p99),
			cell(st, "build_meta_us", p50), cell(st, "build_meta_us", p90),
			cell(st, "get_finished_us", p50), cell(st, "unaccounted_us", p50), st.Malformed})
	}
	var cols []table.ColumnConfig
	for i := 2; i <= 10; i++ {
		cols = append(cols, table.ColumnConfig{Number: i, Align: text.AlignRight})
	}
	t.SetColumnConfigs(cols)
	t.SetCaption("— = timer not measured in this log (absent, not zero); ~ = binned (±0.05%%)")
	if markdown {
		t.RenderMarkdown()
		return
	}
	style := table.StyleLight
	style.Format.Header = text.FormatDefault // keep "µs" and the timer names as written
	t.SetStyle(style)
	t.Render()
}
