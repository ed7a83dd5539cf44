package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/mbench/mbench/internal/durable"
	"github.com/mbench/mbench/orchestrator"
	"github.com/mbench/mbench/results"
	"github.com/urfave/cli/v2"
)

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "rewrite cells/<id>/summary_A.json, report.md, tables.csv and plots/ of a (possibly partial) sweep; with --format, --output or an override, print (or write to --output) one format instead, read-only",
		ArgsUsage: "DIR",
		Description: "Plain `mbench export DIR` rewrites the exports inside DIR (it takes the directory's lock).\n" +
			"With --format, --output, --confidence or --baseline it reads the sweep without the lock and writes nothing\n" +
			"into DIR: the chosen format goes to stdout, or to --output. So it reads a sweep another mbench is running,\n" +
			"or one on a read-only file system, and an override never replaces the report the sweep recorded.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Value: "md", Usage: "what to print or write to --output: md (report.md), csv (tables.csv) or json (cells, comparisons, noise floor)"},
			outputFlag("write the chosen format to this file (nothing is written into DIR)", false),
			&cli.Float64Flag{Name: "confidence", Usage: "analyse at this confidence instead of the one the sweep recorded (read-only; the report says so)"},
			&cli.StringFlag{Name: "baseline", Usage: "compare with this config instead of the recorded baseline (read-only; the report says so)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("export: want exactly one DIR argument")}
			}
			format := c.String("format")
			if format != "md" && format != "csv" && format != "json" {
				return usageError{fmt.Errorf("export: --format %q: valid: md, csv, json", format)}
			}
			ov := orchestrator.ExportOverrides{Confidence: c.Float64("confidence"), Baseline: c.String("baseline")}
			if c.IsSet("confidence") && !(ov.Confidence > 0 && ov.Confidence < 1) {
				return usageError{fmt.Errorf("export: --confidence %v: valid: a number between 0 and 1, such as 0.95", ov.Confidence)}
			}
			dir := c.Args().First()
			readOnly := c.IsSet("format") || c.IsSet("output") || c.IsSet("confidence") || c.IsSet("baseline")
			export := orchestrator.ExportReport
			if readOnly {
				export = orchestrator.ExportView
			}
			rep, err := export(c.Context, dir, ov)
			if errors.Is(err, orchestrator.ErrBadOverride) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			for _, w := range rep.Warnings {
				fmt.Fprintln(c.App.ErrWriter, "warning:", w)
			}
			if !readOnly {
				fmt.Fprintf(c.App.Writer, "report: %s\n", filepath.Join(dir, "report.md"))
				return nil
			}
			var data []byte
			switch format {
			case "md":
				data = rep.Contents["report.md"]
			case "csv":
				data = rep.Contents["tables.csv"]
			case "json":
				data, err = json.MarshalIndent(struct {
					Cells       []results.CellSummary   `json:"cells"`
					Comparisons []results.ComparisonRow `json:"comparisons"`
					NoiseFloor  []results.ComparisonRow `json:"noise_floor"`
					Warnings    []string                `json:"warnings,omitempty"`
				}{rep.Cells, rep.Comparisons, rep.NoiseFloor, rep.Warnings}, "", "  ")
			}
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			if c.String("output") == "" { // the format asked for, on stdout: nothing else goes there
				if format == "json" {
					data = append(data, '\n')
				}
				_, err := c.App.Writer.Write(data)
				return err
			}
			if err := durable.WriteFile(c.String("output"), append(data, '\n'), 0o644); err != nil {
				return fmt.Errorf("export: %w", err)
			}
			fmt.Fprintf(c.App.ErrWriter, "wrote %s (%s)\n", c.String("output"), format)
			return nil
		},
	}
}
