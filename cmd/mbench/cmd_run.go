package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mbench/mbench/internal/cpupin"
	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/orchestrator"
	"github.com/mbench/mbench/shquote"
	"github.com/urfave/cli/v2"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a sweep of a matrix (or continue one in an existing --out directory)",
		ArgsUsage: "MATRIX",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "results directory (default results/<name>-<UTC timestamp>)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the exact commands per host and run nothing"},
			&cli.BoolFlag{Name: "force", Usage: "mix results even if the environment fingerprint changed"},
			&cli.BoolFlag{Name: "quiet", Usage: "no progress output"},
			&cli.BoolFlag{Name: "keep-going", Usage: "when a config's engine fails before it is ready twice with the same cause, mark it failed and go on with the other configs (default: stop the sweep)"},
			&cli.StringFlag{Name: "client-cpus", Usage: "run the load generator on these CPUs of this machine during each run's load, e.g. 0,1 (Linux), and keep local engines' processes off them"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("run: want exactly one MATRIX argument")}
			}
			opts, err := sweepOptions(c)
			if err != nil {
				return err
			}
			if !opts.DryRun { // validate's checks, before any engine starts
				m, err := matrices.Load(c.Args().First())
				if err != nil {
					return err
				}
				// A sweep continued in its directory may meet its own
				// engines on its ports (left by an mbench that died): the
				// sweep stops them itself, so the port check is its own.
				_, statErr := os.Stat(filepath.Join(opts.Out, "sweep.json"))
				if err := checkHosts(c, m, false, opts.Out != "" && statErr == nil); err != nil {
					return fmt.Errorf("%w\nnothing was started (mbench validate %s runs these checks)", err, shquote.Quote(c.Args().First()))
				}
			}
			o, err := orchestrator.Run(c.Context, c.Args().First(), opts)
			return finishSweep(c, o, err)
		},
	}
}

func resumeCommand() *cli.Command {
	return &cli.Command{
		Name:      "resume",
		Usage:     "continue an interrupted sweep exactly as planned",
		ArgsUsage: "DIR",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Usage: "mix results even if the environment fingerprint changed"},
			&cli.BoolFlag{Name: "quiet", Usage: "no progress output"},
			&cli.BoolFlag{Name: "keep-going", Usage: "when a config's engine fails before it is ready twice with the same cause, mark it failed and go on with the other configs (default: stop the sweep)"},
			&cli.StringFlag{Name: "client-cpus", Usage: "run the load generator on these CPUs of this machine during each run's load, e.g. 0,1 (Linux), and keep local engines' processes off them"},
			&cli.StringFlag{Name: "matrix", Usage: "the sweep's matrix file, when it moved or holds secrets (it must be the matrix the sweep ran)"},
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
}

func sweepOptions(c *cli.Context) (orchestrator.Options, error) {
	self, err := os.Executable()
	if err != nil {
		return orchestrator.Options{}, fmt.Errorf("find the mbench binary: %w", err)
	}
	o := orchestrator.Options{
		Self:      self,
		SelfEnv:   selfEnv(),
		Out:       c.String("out"),
		DryRun:    c.Bool("dry-run"),
		Force:     c.Bool("force"),
		Quiet:     c.Bool("quiet"),
		KeepGoing: c.Bool("keep-going"),
		Version:   version,
		Stdout:    c.App.Writer,
		Stderr:    c.App.ErrWriter,
		// Inside a Slurm job (sbatch), its allocation is the slurm host's.
		SlurmJob: os.Getenv("SLURM_JOB_ID"),
	}
	if v := c.String("client-cpus"); v != "" {
		if o.ClientCPUs, err = cpupin.Parse(v); err != nil {
			return orchestrator.Options{}, usageError{fmt.Errorf("%s: --client-cpus: %w", c.Command.Name, err)}
		}
	}
	resume := "mbench resume "
	if len(o.ClientCPUs) > 0 {
		resume += "--client-cpus " + cpupin.Format(o.ClientCPUs) + " "
	}
	if c.Command.Name == "resume" {
		o.MatrixOverride = c.String("matrix")
		o.ResumeHint = resume + shquote.Quote(c.Args().First())
	} else if o.Out != "" {
		o.ResumeHint = resume + shquote.Quote(o.Out)
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
	w, ew := c.App.Writer, c.App.ErrWriter
	for _, r := range o.Removed {
		fmt.Fprintf(ew, "removed cell (results kept on disk): %s %s rate=%g %s\n", r.ID, r.Config, r.Rate, r.Shape)
	}
	wd, _ := os.Getwd()
	rel, rerr := filepath.Rel(wd, o.Report)
	if rerr != nil {
		rel = o.Report
	}
	fmt.Fprintf(w, "report: %s\n", rel)
	fmt.Fprintf(ew, "stopped: %s\n", o.StopReason)
	fmt.Fprintf(ew, "sweep done: %d runs: %s\n", o.Verdicts.Total(), o.Verdicts)
	var why []string
	if len(o.Unusable) > 0 {
		why = append(why, fmt.Sprintf("%d of the sweep's cells have no usable run, so the report cannot compare them:\n  %s\nsee the report's \"Run verdicts\" section for why",
			len(o.Unusable), strings.Join(o.Unusable, "\n  ")))
	}
	if len(o.Skipped) > 0 {
		// A cell given up has fewer runs than the sweep planned, whatever
		// it measured before: not the result the matrix asked for.
		why = append(why, fmt.Sprintf("%d of the sweep's cells were marked failed and their later runs skipped:\n  %s",
			len(o.Skipped), strings.Join(o.Skipped, "\n  ")))
	}
	if len(why) > 0 {
		return noResultError{fmt.Errorf("%w: %s", orchestrator.ErrNoResult, strings.Join(why, "\n"))}
	}
	return nil
}

// noResultError is a command that finished, but what it measured is not a
// result: a sweep with cells that have no usable run, a load run whose
// verdict is not ok. It exits 3.
type noResultError struct{ err error }

func (e noResultError) Error() string { return e.err.Error() }
func (e noResultError) Unwrap() error { return e.err }
func (e noResultError) ExitCode() int { return exitNoResult }

// selfEnv is the environment that makes a re-executed binary act as mbench;
// only the tests set it (they run the test binary as mbench).
var selfEnv = func() []string { return nil }
