package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mbench/mbench/matrices"
	"github.com/urfave/cli/v2"
)

// interspersed moves a subcommand's flags ahead of its positional arguments,
// so `mbench run MATRIX --out DIR` works as the usage lines promise
// (urfave/cli v2 stops parsing flags at the first positional argument).
func interspersed(cmds []*cli.Command, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := append([]string(nil), args[0])
	rest := args[1:]
	for len(rest) > 0 {
		cmd := findCommand(cmds, rest[0])
		if cmd == nil {
			return append(out, rest...)
		}
		out = append(out, rest[0])
		rest = rest[1:]
		if len(cmd.Subcommands) > 0 {
			cmds = cmd.Subcommands
			continue
		}
		var flags, pos []string
		for i := 0; i < len(rest); i++ {
			a := rest[i]
			if a == "--" {
				pos = append(pos, rest[i:]...)
				break
			}
			if !strings.HasPrefix(a, "-") || a == "-" {
				pos = append(pos, a)
				continue
			}
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			if takesValue(cmd, name) && i+1 < len(rest) {
				i++
				flags = append(flags, rest[i])
			}
		}
		return append(append(out, flags...), pos...)
	}
	return out
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name || slices.Contains(c.Aliases, name) {
			return c
		}
	}
	return nil
}

func takesValue(cmd *cli.Command, name string) bool {
	for _, f := range cmd.Flags {
		if slices.Contains(f.Names(), name) {
			bf, ok := f.(*cli.BoolFlag)
			return !ok || bf == nil
		}
	}
	return true
}

// parseRates reads a comma-separated list of rates, each a finite number > 0
// (strconv and so the flag parser accept "Inf" and "NaN"); flag names the
// flag in a message, a usage error (exit 2).
func parseRates(cmd, flag, list string) ([]float64, error) {
	var rates []float64
	for _, f := range strings.Split(list, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, usageError{fmt.Errorf("%s: %s: %q is not a number", cmd, flag, f)}
		}
		if !(r > 0) || math.IsInf(r, 0) {
			return nil, usageError{fmt.Errorf("%s: %s %v: a rate must be a finite number of requests per second > 0", cmd, flag, r)}
		}
		rates = append(rates, r)
	}
	return rates, nil
}

// requireFlags makes cmd and its subcommands refuse a missing required flag
// with a usage error (exit 2) of their own: the flags' Required marks are
// taken off, so that urfave/cli does not refuse them first with an error
// that could be told apart only by its text.
func requireFlags(cmd *cli.Command) {
	for _, sub := range cmd.Subcommands {
		requireFlags(sub)
	}
	var names []string
	for _, f := range cmd.Flags {
		if _, _, req := flagFields(f); req != nil && *req {
			*req = false
			names = append(names, f.Names()[0])
		}
	}
	if len(names) == 0 || cmd.Action == nil {
		return
	}
	action := cmd.Action
	cmd.Action = func(c *cli.Context) error {
		for _, n := range names {
			if !c.IsSet(n) {
				return usageError{fmt.Errorf("%s: required flag --%s not set", strings.TrimPrefix(c.Command.HelpName, c.App.Name+" "), n)}
			}
		}
		return action(c)
	}
}

// flagFields are the settings of f that mbench rewrites after declaring
// it: its usage, its default text and its Required mark (nil for a flag
// type mbench does not use).
func flagFields(f cli.Flag) (usage, defaultText *string, required *bool) {
	switch f := f.(type) {
	case *cli.StringFlag:
		return &f.Usage, &f.DefaultText, &f.Required
	case *cli.StringSliceFlag:
		return &f.Usage, &f.DefaultText, &f.Required
	case *cli.IntFlag:
		return &f.Usage, &f.DefaultText, &f.Required
	case *cli.Int64Flag:
		return &f.Usage, &f.DefaultText, &f.Required
	case *cli.Float64Flag:
		return &f.Usage, &f.DefaultText, &f.Required
	case *cli.DurationFlag:
		return &f.Usage, &f.DefaultText, &f.Required
	case *cli.BoolFlag:
		return &f.Usage, &f.DefaultText, &f.Required
	}
	return nil, nil, nil
}

// flagHint adds the flag meant to urfave/cli's "flag provided but not
// defined: -name": the command's flag nearest to what was typed (one or
// two letters off, or the same name), written with the two dashes that
// vLLM's and mbench's documentation use.
func flagHint(cmd *cli.Command, err error) error {
	const prefix = "flag provided but not defined: -"
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return err
	}
	typed := strings.TrimLeft(strings.TrimPrefix(msg, prefix), "-")
	var names []string
	for _, f := range cmd.Flags {
		names = append(names, f.Names()...)
	}
	best := matrices.Nearest(typed, names)
	if best == "" {
		return fmt.Errorf("%s: --%s is not a flag of mbench %s (mbench %s --help lists them)", cmd.Name, typed, cmd.Name, cmd.Name)
	}
	return fmt.Errorf("%s: --%s is not a flag of mbench %s: did you mean --%s?", cmd.Name, typed, cmd.Name, best)
}
