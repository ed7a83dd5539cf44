package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/urfave/cli/v2"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:  "bench-load",
			Usage: "measure the load generator against the in-tree stub (16 tokens/request) on 127.0.0.1",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "rates", Value: "500,1000,2000,4000,6000,8000", Usage: "comma-separated Poisson rates (req/s)"},
				&cli.DurationFlag{Name: "duration", Value: 3 * time.Second, Usage: "measured time per rate"},
				&cli.BoolFlag{Name: "json", Usage: "print the rows as JSON after the table"},
			},
			Action: func(c *cli.Context) error {
				var rates []float64
				for _, f := range strings.Split(c.String("rates"), ",") {
					r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
					if err != nil || r <= 0 {
						return usageError{fmt.Errorf("bench-load: --rates: %q is not a positive number", f)}
					}
					rates = append(rates, r)
				}
				rows, err := openloop.MeasurePrecision(c.Context, rates, c.Duration("duration"), c.App.Writer)
				if err != nil {
					return err
				}
				best := 0.0
				for _, r := range rows {
					if r.Holds && r.Rate > best {
						best = r.Rate
					}
				}
				fmt.Fprintf(c.App.Writer, "highest rate holding achieved/offered >= 0.99 and lag p99 <= 5 ms: %g req/s\n", best)
				if c.Bool("json") {
					return json.NewEncoder(c.App.Writer).Encode(rows)
				}
				return nil
			},
		}
	})
}
