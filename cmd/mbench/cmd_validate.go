package main

import (
	"errors"
	"fmt"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/openloop"
	"github.com/urfave/cli/v2"
)

// validateCommand is the validate command.
func validateCommand() *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "check a matrix: list its cells, estimate the sweep's duration, show the launch commands, warn about cells that cannot give a result",
		ArgsUsage: "MATRIX",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("validate: want exactly one argument, the matrix file")}
			}
			m, err := matrices.Load(c.Args().First())
			if err != nil {
				return err // matrices.Errors: one file:line problem per line, ExitCode 2
			}
			if err := m.Describe(c.App.Writer); err != nil {
				return err
			}
			ws, err := matrixWarnings(m)
			for _, w := range ws {
				fmt.Fprintln(c.App.ErrWriter, "warning:", w.String(m.File))
			}
			return err
		},
	}

}

// matrixWarnings is m.Warnings plus what needs the trace files read: trace
// requests longer than a config's max model length.
func matrixWarnings(m *matrices.Matrix) ([]matrices.Warning, error) {
	ws := m.Warnings()
	for _, sh := range m.Shapes {
		if sh.Trace == nil {
			continue
		}
		reqs, err := openloop.LoadTrace(sh.Trace.Path)
		if err != nil {
			return ws, err
		}
		for _, name := range m.ConfigOrder {
			maxLen, where := m.MaxModelLen(name)
			if maxLen <= 0 {
				continue
			}
			n, first := 0, 0
			for _, r := range reqs {
				if r.InputLength+r.OutputLength > maxLen {
					if n == 0 {
						first = r.Line
					}
					n++
				}
			}
			if n > 0 {
				ws = append(ws, matrices.Warning{Field: "shapes." + sh.Name + ".trace",
					Msg: fmt.Sprintf("%d of %d requests of %s (the first at line %d) have input + output longer than config %s's max model length %d (%s): the engine will refuse them (HTTP 400, class context_length) and their runs may be graded errors",
						n, len(reqs), sh.Trace.Path, first, name, maxLen, where)})
			}
		}
	}
	return ws, nil
}
