package main

import (
	"errors"

	"github.com/mbench/mbench/matrices"
	"github.com/urfave/cli/v2"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "validate",
			Usage:     "check a matrix: list its cells, estimate the sweep's duration, show the launch commands",
			ArgsUsage: "MATRIX",
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usageError{errors.New("validate: want exactly one argument, the matrix file")}
				}
				m, err := matrices.Load(c.Args().First())
				if err != nil {
					return err // matrices.Errors: one file:line problem per line, ExitCode 2
				}
				return m.Describe(c.App.Writer)
			},
		}
	})
}
