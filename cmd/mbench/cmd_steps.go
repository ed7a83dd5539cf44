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

func stepsCommand() *cli.Command {
	return &cli.Command{
		Name:      "steps",
		Usage:     "summarize engine_step.jsonl files: n_steps and percentiles of every timer, per path",
		ArgsUsage: "FILE...",
		Description: "Prints one row per step log and engine path (step() or the batch queue), with the\n" +
			"p50 of every timed part and gpu_us, then says which batch each part belongs to,\n" +
			"whether GPU time was measured (and why not), and every hook the engine could not\n" +
			"apply (decomposition incomplete). A timer the log never measured is shown as —\n" +
			"(absent), never as 0. Worker files <log>.worker.<pid>.jsonl next to a log are\n" +
			"merged in for get_finished_us unless --no-workers. FILE may be gzipped (.gz).",
		Flags: []cli.Flag{
			formatFlag(stepsFormats...),
			formatAlias("json"), formatAlias("markdown"),
			&cli.Int64Flag{Name: "from-us", Usage: "keep steps with ts_us ≥ this (µs since the epoch)"},
			&cli.Int64Flag{Name: "to-us", Usage: "keep steps with ts_us ≤ this"},
			&cli.BoolFlag{Name: "no-workers", Usage: "do not merge worker get_finished_us files"},
		},
		Action: stepsAction,
	}
}

// stepsFormats are what steps prints: a table, the table as Markdown, JSON.
var stepsFormats = []string{"text", "markdown", "json"}

// stepsFile is one file's summary in --format json output.
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
	format, err := outputFormat(c, "steps", stepsFormats, "json", "markdown")
	if err != nil {
		return err
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
	if format == "json" {
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintln(c.App.Writer, string(b))
		return nil
	}
	renderStepsTable(c.App.Writer, out, format == "markdown")
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
func cell(timers map[string]probes.Quantiles, timer string, pick func(probes.Quantiles) float64) string {
	q, ok := timers[timer]
	if !ok {
		return "—"
	}
	s := fmt.Sprintf("%.0f", pick(q))
	if q.Approx {
		s = "~" + s
	}
	return s
}

// stepsColumns are the p50 columns of the per-path table after the step
// duration: timer, header.
var stepsColumns = []struct{ timer, head string }{
	{"schedule_us", "schedule"}, {"build_meta_us", "build_meta"}, {"launch_us", "launch"},
	{"execute_us", "execute"}, {"wait_us", "wait"}, {"update_us", "update"},
	{"get_finished_us", "get_finished"}, {"gpu_us", "gpu"}, {"unaccounted_us", "unaccounted"},
}

// pathWords names a path and says which batch its timers belong to.
var pathWords = map[string][2]string{
	probes.StepPathStep: {"step()", "step(): every timer is of the step's one batch; execute = launch + wait for its result + sampling"},
	probes.StepPathBatchQueue: {"batch queue", "batch queue: schedule, build_meta, launch = the NEW batch launched in the step; " +
		"wait, update, gpu = the EARLIER batch it collected (wait is the engine thread blocked on it, not its GPU time)"},
}

func renderStepsTable(w io.Writer, files []stepsFile, markdown bool) {
	p50 := func(q probes.Quantiles) float64 { return q.P50 }
	p90 := func(q probes.Quantiles) float64 { return q.P90 }
	p99 := func(q probes.Quantiles) float64 { return q.P99 }
	t := table.NewWriter()
	t.SetOutputMirror(w)
	head := table.Row{"file", "path", "n_steps", "step p50 µs", "step p90", "step p99"}
	for _, c := range stepsColumns {
		head = append(head, c.head+" p50")
	}
	t.AppendHeader(append(head, "malformed"))
	used := map[string]bool{}
	for _, f := range files {
		st := f.Steps
		paths := []string{probes.StepPathStep, probes.StepPathBatchQueue}
		if len(st.Paths) == 0 { // no step at all: one row says so
			t.AppendRow(table.Row{f.File, "—", st.NSteps, "—", "—", "—", "—", "—", "—", "—", "—", "—", "—", "—", "—", st.Malformed})
			continue
		}
		for _, name := range paths {
			ps, ok := st.Paths[name]
			if !ok {
				continue
			}
			used[name] = true
			row := table.Row{f.File, pathWords[name][0], ps.NSteps,
				cell(ps.Timers, "step_duration_us", p50), cell(ps.Timers, "step_duration_us", p90), cell(ps.Timers, "step_duration_us", p99)}
			for _, c := range stepsColumns {
				row = append(row, cell(ps.Timers, c.timer, p50))
			}
			t.AppendRow(append(row, st.Malformed))
		}
	}
	var cols []table.ColumnConfig
	for i := 3; i <= len(head)+1; i++ {
		cols = append(cols, table.ColumnConfig{Number: i, Align: text.AlignRight})
	}
	t.SetColumnConfigs(cols)
	t.SetCaption("— = timer not measured in this log (absent, not zero); ~ = binned (±0.05%%)")
	if markdown {
		t.RenderMarkdown()
	} else {
		style := table.StyleLight
		style.Format.Header = text.FormatDefault // keep "µs" and the timer names as written
		t.SetStyle(style)
		t.Render()
	}
	for _, name := range []string{probes.StepPathStep, probes.StepPathBatchQueue} {
		if used[name] {
			fmt.Fprintf(w, "%s\n", pathWords[name][1])
		}
	}
	for _, f := range files {
		fmt.Fprintf(w, "%s: %s\n", f.File, gpuWords(f.Steps.GPU))
		for _, s := range f.Steps.Incomplete {
			fmt.Fprintf(w, "%s: decomposition incomplete: %s\n", f.File, s)
		}
	}
}

// gpuWords says whether a log measured GPU time, and how or why not.
func gpuWords(g probes.GPUTiming) string {
	if g.Measured {
		s := fmt.Sprintf("GPU time measured (gpu_us on %d steps", g.Steps)
		if g.Late > 0 {
			s += fmt.Sprintf(", %d in GPU lines after their step", g.Late)
		}
		if g.Source != "" {
			s += "; " + g.Source
		}
		if g.HostBound > 0 {
			s += fmt.Sprintf("; %d host-bound spans left out: the GPU reached the forward's start event before the host had launched it, so each span holds host time, an upper bound (p50 %.0f µs)", g.HostBound, g.HostBoundSpanP50)
		}
		return s + ")"
	}
	return "GPU time not measured: " + g.Reason
}
