package main

import (
	"errors"
	"fmt"

	"github.com/mbench/mbench/orchestrator"
	"github.com/urfave/cli/v2"
)

func init() {
	register(&cli.Command{
		Name:      "export",
		Usage:     "write cells/<id>/summary_A.json, report.md, tables.csv and plots/ of a (possibly partial) sweep",
		ArgsUsage: "DIR",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("export: want exactly one DIR argument")}
			}
			report, err := orchestrator.ExportDir(c.Context, c.Args().First())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "report: %s\n", report)
			return nil
		},
	})
}
