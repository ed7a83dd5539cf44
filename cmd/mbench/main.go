// Command mbench is a microbenchmark harness and experiment orchestrator for
// LLM serving engines. Its main is thin: all work happens in run, which the
// tests call directly.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/mbench/mbench/orchestrator"
	"github.com/urfave/cli/v2"
)

// exitCoder is implemented by errors that carry a process exit code (for
// example 2 for an invalid matrix).
type exitCoder interface{ ExitCode() int }

// usageError marks bad input: a wrong flag, a malformed matrix. It exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }
func (e usageError) ExitCode() int { return exitUsage }

// commands is every subcommand of mbench, in one place; each is defined in
// its cmd_<name>.go. They are factories: urfave/cli keeps state in commands
// and flags, so every run (tests call run many times in one process) builds
// fresh ones. help lists them by name.
var commands = []func() *cli.Command{
	validateCommand, runCommand, resumeCommand, statusCommand, exportCommand,
	loadCommand, simCommand, probeCommand, stepsCommand, traceCommand,
	benchLoadCommand, benchStubCommand, routerCommand,
}

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A reader that went away (mbench run … | head) must not kill mbench
	// mid-sweep with its engines up: with SIGPIPE handled, a write to the
	// closed pipe fails instead, and the sweep goes on. Handled, not
	// ignored, so that the engines mbench starts get the default.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	sigs := make(chan os.Signal, 2)
	// A closed terminal (SIGHUP) and SIGQUIT (Ctrl-\) tear down as Ctrl-C
	// does: no engine may outlive mbench, and no goroutine dump hides why.
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	cmd := commandName(os.Args)
	go func() {
		sig := <-sigs
		msg, exitNow := interruptNotice(cmd, sig)
		fmt.Fprintln(os.Stderr, msg)
		if exitNow {
			os.Exit(exitInterrupted)
		}
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "mbench: second interrupt: killing engines and exiting now")
		orchestrator.EmergencyStop()
		os.Exit(exitInterrupted)
	}()
	err := run(ctx, os.Args, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mbench:", err)
		os.Exit(exitCode(err))
	}
}

// commandName is the subcommand args name ("" when none).
func commandName(args []string) string {
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}

// interruptNotice is what mbench says on the first signal, in the words of
// the command it interrupts, and whether it exits at once: a command that
// starts nothing has nothing to tear down.
func interruptNotice(cmd string, sig os.Signal) (msg string, exitNow bool) {
	name := cmp.Or(map[os.Signal]string{os.Interrupt: "interrupt", syscall.SIGTERM: "SIGTERM", syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT"}[sig], sig.String())
	how := "interrupted"
	if sig != os.Interrupt {
		how += " (" + name + ")"
	}
	switch cmd {
	case "load":
		return fmt.Sprintf("mbench load: %s: stopping the load; the requests measured so far are written (interrupt again to exit at once)", how), false
	case "run", "resume", "bench-load":
		return fmt.Sprintf("mbench: %s: stopping the load and tearing down engines (interrupt again to exit at once)", how), false
	case "sim", "router", "probe", "bench-stub": // a sweep's own processes: their parent (a sweep, a Slurm step) stops them
		return fmt.Sprintf("mbench %s: stopping on %s", cmd, name), false
	case "export":
		return fmt.Sprintf("mbench export: %s: stopping the export (interrupt again to exit at once)", how), false
	}
	return fmt.Sprintf("%s: %s: stopped (it starts nothing, so there is nothing to tear down)", strings.TrimSpace("mbench "+cmd), how), true
}

// The exit statuses of mbench (docs/commands.md: "Exit status").
const (
	// 0: what was asked for was done, and every result is usable.
	exitError = 1 // the command failed (a host, a disk, an engine port, …): it says why
	exitUsage = 2 // bad usage: flags, subcommand, arguments, an invalid matrix or input file
	// exitNoResult: the command finished, but some of what it measured is not
	// a result (a sweep with cells that have no usable run; a load run whose
	// verdict is not ok).
	exitNoResult = 3
	// exitLocked: the results directory is in use by another mbench process.
	exitLocked = 4
	// exitInterrupted is the exit status after Ctrl-C (128 + SIGINT), as
	// shells report it for a process killed by the signal.
	exitInterrupted = 130
)

// exitCode maps an error from run to the process exit status.
func exitCode(err error) int {
	var ec exitCoder
	var locked *orchestrator.LockedError
	switch {
	case errors.As(err, &locked):
		return exitLocked
	case errors.As(err, &ec):
		return ec.ExitCode()
	case errors.Is(err, orchestrator.ErrInterrupted):
		return exitInterrupted
	}
	return exitError
}

// run is the whole program: it parses args and dispatches to a subcommand.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmds := make([]*cli.Command, 0, len(commands))
	for _, c := range commands {
		cmds = append(cmds, c())
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name < cmds[j].Name })
	app := &cli.App{
		Name:                 "mbench",
		Usage:                "microbenchmark harness and experiment orchestrator for LLM serving engines",
		Version:              version,
		Commands:             cmds,
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: false,
		ExitErrHandler:       func(*cli.Context, error) {}, // never os.Exit inside run
		OnUsageError:         func(_ *cli.Context, err error, _ bool) error { return usageError{err} },
	}
	for _, c := range cmds {
		requireFlags(c)
		c.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return usageError{flagHint(c, err)} }
	}
	if len(args) <= 1 {
		// No command: the help goes to stderr (stdout carries only what was
		// asked for), and it is bad usage, not success.
		app.Writer = stderr
		_ = app.RunContext(ctx, args)
		return usageError{errors.New("no command given; run mbench help for the list")}
	}
	if a := args[1]; !strings.HasPrefix(a, "-") && a != "help" && a != "h" && findCommand(cmds, a) == nil {
		return usageError{fmt.Errorf("unknown command %q; run mbench help for the list", args[1])}
	}
	if args[1] == "load" {
		args = expandNargs(args)
	}
	ctx = context.WithValue(ctx, argsKey{}, args)
	return app.RunContext(ctx, interspersed(cmds, args))
}

// version is the mbench version, recorded in every sweep's fingerprint.
var version = "0.1.0-dev"
