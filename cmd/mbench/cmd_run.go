package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator"
	"github.com/urfave/cli/v2"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "run",
			Usage:     "run a sweep of a matrix (or continue one in an existing --out directory)",
			ArgsUsage: "MATRIX",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "out", Usage: "results directory (default results/<name>-<UTC timestamp>)"},
				&cli.BoolFlag{Name: "dry-run", Usage: "print the exact commands per host and run nothing"},
				&cli.BoolFlag{Name: "force", Usage: "mix results even if the environment fingerprint changed"},
				&cli.BoolFlag{Name: "quiet", Usage: "no progress output"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usageError{errors.New("run: want exactly one MATRIX argument")}
				}
				opts, err := sweepOptions(c)
				if err != nil {
					return err
				}
				o, err := orchestrator.Run(c.Context, c.Args().First(), opts)
				return finishSweep(c, o, err)
			},
		}
	})
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "resume",
			Usage:     "continue an interrupted sweep exactly as planned",
			ArgsUsage: "DIR",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "force", Usage: "mix results even if the environment fingerprint changed"},
				&cli.BoolFlag{Name: "quiet", Usage: "no progress output"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usageError{errors.New("resume: want exactly one DIR argument")}
				}
				opts, err := sweepOptions(c)
				if err != nil {
					return err
				}
				o, err := orchestrator.Resume(c.Context, c.Args().First(), opts)
				return finishSweep(c, o, err)
			},
		}
	})
}

func sweepOptions(c *cli.Context) (orchestrator.Options, error) {
	self, err := os.Executable()
	if err != nil {
		return orchestrator.Options{}, fmt.Errorf("find the mbench binary: %w", err)
	}
	o := orchestrator.Options{
		Self:    self,
		SelfEnv: selfEnv(),
		Out:     c.String("out"),
		DryRun:  c.Bool("dry-run"),
		Force:   c.Bool("force"),
		Quiet:   c.Bool("quiet"),
		Version: version,
		Stdout:  c.App.Writer,
		Stderr:  c.App.ErrWriter,
	}
	if c.Command.Name == "resume" {
		o.ResumeHint = "mbench resume " + matrices.ShellQuote(c.Args().First())
	} else if o.Out != "" {
		o.ResumeHint = "mbench resume " + matrices.ShellQuote(o.Out)
	}
	return o, nil
}

func finishSweep(c *cli.Context, o *orchestrator.Outcome, err error) error {
	if err != nil {
		return err
	}
	if o == nil { // dry run
		return nil
	}
	w := c.App.Writer
	for _, r := range o.Removed {
		fmt.Fprintf(w, "removed cell (results kept on disk): %s %s rate=%g %s\n", r.ID, r.Config, r.Rate, r.Shape)
	}
	fmt.Fprintf(w, "sweep done: %d runs (%d failed); stopped: %s\n", o.Runs, o.Failed, o.StopReason)
	rel, rerr := filepath.Rel(mustGetwd(), o.Report)
	if rerr != nil {
		rel = o.Report
	}
	fmt.Fprintf(w, "report: %s\n", rel)
	return nil
}

func mustGetwd() string {
	wd, _ := os.Getwd()
	return wd
}

// selfEnv is the environment that makes a re-executed binary act as mbench;
// only the tests set it (they run the test binary as mbench).
var selfEnv = func() []string { return nil }
