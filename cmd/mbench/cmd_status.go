package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mbench/mbench/orchestrator"
	"github.com/urfave/cli/v2"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "say where a sweep stands (running or not, blocks, runs by verdict), read-only: no lock taken, nothing written",
		ArgsUsage: "DIR",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text or json"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("status: want exactly one DIR argument")}
			}
			format := c.String("format")
			if format != "text" && format != "json" {
				return usageError{fmt.Errorf("status: --format %q: valid: text, json", format)}
			}
			st, err := orchestrator.ReadStatus(c.Args().First())
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			if format == "text" {
				_, err = fmt.Fprint(c.App.Writer, st.Text())
				return err
			}
			data, err := json.MarshalIndent(st, "", "  ")
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			_, err = c.App.Writer.Write(append(data, '\n'))
			return err
		},
	}
}
