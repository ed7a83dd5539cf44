package main

import (
	"errors"
	"fmt"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/orchestrator"
	"github.com/urfave/cli/v2"
)

func validateCommand() *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "check a matrix before a GPU is held: list its cells, estimate the sweep's duration, show the launch commands, check the engine binary and model file on each host and the local ports, warn about cells that cannot give a result",
		ArgsUsage: "MATRIX",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "offline", Usage: "check only what this machine can tell: dial no host"},
		},
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
			if err != nil {
				return err
			}
			return checkHosts(c, m, c.Bool("offline"), false)
		},
	}
}

// checkHosts runs the checks a sweep of m needs before anything starts
// (orchestrator.Preflight): validate's, and run's before its sweep.
func checkHosts(c *cli.Context, m *matrices.Matrix, offline, skipPorts bool) error {
	var sim []string
	for _, f := range simCommand().Flags {
		sim = append(sim, f.Names()[0])
	}
	return orchestrator.Preflight(c.Context, m, orchestrator.PreflightOptions{Offline: offline, SkipPorts: skipPorts, SimFlags: sim, Stderr: c.App.ErrWriter})
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
