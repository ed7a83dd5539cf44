package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
	"github.com/urfave/cli/v2"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:  "trace",
			Usage: "work with Mooncake-format traces",
			Subcommands: []*cli.Command{{
				Name:  "sample",
				Usage: "sample whole sessions of a trace down to about N requests",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "in", Required: true, Usage: "the big trace (JSONL)"},
					&cli.StringFlag{Name: "out", Required: true, Usage: "the sampled trace to write"},
					&cli.IntFlag{Name: "requests", Required: true, Usage: "about this many requests"},
					&cli.Int64Flag{Name: "seed", Value: 42, Usage: "sampling seed"},
				},
				Action: func(c *cli.Context) error {
					if c.Int("requests") <= 0 {
						return usageError{errors.New("trace sample: --requests must be > 0")}
					}
					in, err := os.Open(c.String("in"))
					if err != nil {
						return fmt.Errorf("trace sample: %w", err)
					}
					defer in.Close()
					var out bytes.Buffer
					if err := openloop.SampleTrace(c.Context, in, &out, c.Int("requests"), c.Int64("seed")); err != nil {
						return err // SampleTrace's errors already say "trace sample"
					}
					data := out.Bytes()
					return results.WriteFileAtomic(c.String("out"), data, 0o644)
				},
			}},
		}
	})
}
