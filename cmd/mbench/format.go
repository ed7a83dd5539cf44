package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// formatFlag is --format, the one way a command is told what to print:
// formats lists what it can print, the first being the default.
func formatFlag(formats ...string) *cli.StringFlag {
	return &cli.StringFlag{Name: "format", Value: formats[0], Usage: "what to print: " + strings.Join(formats, ", ")}
}

// formatAlias is an old boolean flag named as the --format value it stands
// for (--json, --markdown); it keeps working.
func formatAlias(format string) *cli.BoolFlag {
	return &cli.BoolFlag{Name: format, Usage: "the same as --format " + format + " (kept for old scripts)"}
}

// outputFormat is what command cmd prints: --format's value, or the format
// an old flag of aliases (formatAlias) stands for. A value the command
// cannot print, or an alias that contradicts --format, is a usage error.
func outputFormat(c *cli.Context, cmd string, formats []string, aliases ...string) (string, error) {
	format := c.String("format")
	if !slices.Contains(formats, format) {
		return "", usageError{fmt.Errorf("%s: --format %q: valid: %s", cmd, format, strings.Join(formats, ", "))}
	}
	for _, alias := range aliases {
		if !c.Bool(alias) {
			continue
		}
		if c.IsSet("format") && format != alias {
			return "", usageError{fmt.Errorf("%s: --%s means --format %s, but --format is %s", cmd, alias, alias, format)}
		}
		format = alias
	}
	return format, nil
}

// outputFlag is --output FILE: the file a command writes what it would
// print into. --out, its old name on these commands, still works; --out
// otherwise names a results directory (run's, load's).
func outputFlag(usage string, required bool) *cli.StringFlag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"out"}, Usage: usage, Required: required}
}
