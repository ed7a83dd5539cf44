package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/mbench/mbench/internal/durable"
	"github.com/mbench/mbench/openloop"
	"github.com/urfave/cli/v2"
)

func traceCommand() *cli.Command {
	return &cli.Command{
		Name:        "trace",
		Usage:       "work with Mooncake-format traces",
		Subcommands: []*cli.Command{traceSampleCommand(), traceStatsCommand()},
	}
}

var (
	sessionsFlag = &cli.StringFlag{Name: "sessions", Value: string(openloop.SessionsAuto),
		Usage: "how requests group into sessions: auto (session_id, else shared hash-id chains) | session_id | hash_chain"}
	commonFracFlag = &cli.Float64Flag{Name: "common-frac", Value: openloop.DefaultCommonFrac,
		Usage: "a hash id in at least this share of requests (0.01 to 1) is a shared system prompt, not a session mark"}
)

func traceSampleCommand() *cli.Command {
	return &cli.Command{
		Name:  "sample",
		Usage: "sample whole sessions of a trace down to about N requests; prints the ideal hit rates to stderr",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "in", Required: true, Usage: "the big trace (JSONL)"},
			outputFlag("the sampled trace to write", true),
			&cli.IntFlag{Name: "requests", Required: true, Usage: "about this many requests"},
			&cli.Int64Flag{Name: "seed", Value: 42, Usage: "sampling seed"},
			sessionsFlag, commonFracFlag,
			&cli.BoolFlag{Name: "keep-lines", Usage: "copy lines verbatim (no session_id added to inferred sessions)"},
		},
		Action: func(c *cli.Context) error {
			if c.Int("requests") <= 0 {
				return usageError{errors.New("trace sample: --requests must be > 0")}
			}
			mode, err := openloop.ParseSessionMode(c.String("sessions"))
			if err != nil {
				return usageError{fmt.Errorf("trace sample: --%w", err)}
			}
			in, err := os.Open(c.String("in"))
			if err != nil {
				return fmt.Errorf("trace sample: %w", err)
			}
			defer in.Close()
			var out bytes.Buffer
			rep, err := openloop.SampleTraceWith(c.Context, in, &out, openloop.SampleOptions{
				Requests: c.Int("requests"), Seed: c.Int64("seed"), Sessions: mode,
				CommonFrac: c.Float64("common-frac"), KeepLines: c.Bool("keep-lines")})
			if err != nil {
				return err // SampleTraceWith's errors already say "trace sample"
			}
			if err := durable.WriteFile(c.String("output"), out.Bytes(), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(c.App.ErrWriter, "trace sample: %d of %d requests, %d of %d sessions (%s); %d lines given an inferred session_id\n"+
				"ideal hit rate (infinite cache, blocks): full trace %.2f%%, sample %.2f%%\n",
				rep.SampledRequests, rep.Requests, rep.SampledSessions, rep.Sessions, mode, rep.Tagged,
				100*rep.IdealHitRate, 100*rep.SampledIdealHitRate)
			return nil
		},
	}
}

func traceStatsCommand() *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "sessions, length distributions and the ideal prefix hit rate (infinite and LRU caches) of a trace",
		ArgsUsage: "TRACE",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "lru", Usage: "LRU cache sizes in blocks of 512 tokens, comma-separated (e.g. 1000,10000)"},
			sessionsFlag, commonFracFlag,
			formatFlag("text", "json"), formatAlias("json"),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("trace stats: give one trace file")}
			}
			format, err := outputFormat(c, "trace stats", []string{"text", "json"}, "json")
			if err != nil {
				return err
			}
			mode, err := openloop.ParseSessionMode(c.String("sessions"))
			if err != nil {
				return usageError{fmt.Errorf("trace stats: --%w", err)}
			}
			lru, err := parseBlockSizes(c.String("lru"))
			if err != nil {
				return usageError{err}
			}
			st, err := openloop.TraceStatsOf(c.Context, c.Args().First(), openloop.StatsOptions{
				Sessions: mode, CommonFrac: c.Float64("common-frac"), LRUBlocks: lru})
			if err != nil {
				return err
			}
			if format == "json" {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return st.WriteText(c.App.Writer)
		},
	}
}

// parseBlockSizes parses --lru's comma-separated positive block counts.
func parseBlockSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("trace stats: --lru: %q is not a cache size in blocks (an integer ≥ 1)", f)
		}
		out = append(out, n)
	}
	return out, nil
}
