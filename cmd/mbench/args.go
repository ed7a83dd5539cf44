package main

import (
	"strings"

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
		if c.Name == name {
			return c
		}
		for _, a := range c.Aliases {
			if a == name {
				return c
			}
		}
	}
	return nil
}

func takesValue(cmd *cli.Command, name string) bool {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if bf, ok := f.(*cli.BoolFlag); ok && bf != nil {
				return false
			}
			return true
		}
	}
	return true
}
