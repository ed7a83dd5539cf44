package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"

	"github.com/mbench/mbench/router"
	"github.com/urfave/cli/v2"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name: "router",
			Usage: "a cache-aware global scheduler: routes OpenAI completions over the given instances by a policy " +
				"(round_robin, sticky, linear, lmetric), optionally offloading HEAVY prefills or splitting prefill and decode (PD)",
			ArgsUsage: "TARGET_URL...",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "addr", Value: "127.0.0.1:9090", Usage: "listen address"},
				&cli.StringFlag{Name: "policy", Value: string(router.RoundRobin), Usage: "round_robin | sticky | linear | lmetric"},
				&cli.Float64Flag{Name: "alpha", Value: 4, Usage: "linear: score = load − alpha·cache_hit (cache_hit in 0..1)"},
				&cli.Float64Flag{Name: "override-factor", Value: 2, Usage: "a pinned instance above this many times the mean load is overridden"},
				&cli.IntFlag{Name: "block-tokens", Value: 16, Usage: "block size of the router's prefix index"},
				&cli.IntFlag{Name: "cache-blocks", Usage: "bound each instance's prefix index to this many blocks, LRU (0 = unbounded)"},
				&cli.BoolFlag{Name: "offload", Usage: "elastic offload: prefill HEAVY requests on another instance, decode on the sticky one"},
				&cli.IntFlag{Name: "heavy-threshold", Value: 20000, Usage: "offload requests with more new tokens than this"},
				&cli.IntFlag{Name: "max-offload", Value: 4, Usage: "offloaded prefills in flight at most"},
				&cli.StringSliceFlag{Name: "prefill", Usage: "PD-separated: a producer (prefill) instance URL; repeat per instance; the targets decode"},
				&cli.StringFlag{Name: "log", Usage: "append every routing decision to this JSONL file"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() == 0 {
					return usageError{errors.New("router: give at least one target URL")}
				}
				targets, err := httpURLs(c.Args().Slice())
				if err != nil {
					return err
				}
				producers, err := httpURLs(c.StringSlice("prefill"))
				if err != nil {
					return err
				}
				pol, err := router.ParsePolicy(c.String("policy"))
				if err != nil {
					return usageError{fmt.Errorf("router: --%w", err)}
				}
				if c.Bool("offload") && len(producers) > 0 {
					return usageError{errors.New("router: --offload and --prefill exclude each other (elastic offload is for combined instances)")}
				}
				r, err := router.New(targets, producers, router.Options{Policy: pol, Alpha: c.Float64("alpha"),
					OverrideFactor: c.Float64("override-factor"), BlockTokens: c.Int("block-tokens"),
					CacheBlocks: c.Int("cache-blocks"), Offload: c.Bool("offload"),
					HeavyTokens: c.Int("heavy-threshold"), MaxOffload: c.Int("max-offload")})
				if err != nil {
					return usageError{fmt.Errorf("router: %w", err)}
				}
				var log *router.Log
				if p := c.String("log"); p != "" {
					f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
					if err != nil {
						return fmt.Errorf("router: --log: %w", err)
					}
					defer f.Close()
					log = router.NewLog(f)
				} else {
					log = router.NewLog(nil)
				}
				ln, err := net.Listen("tcp", c.String("addr"))
				if err != nil {
					return fmt.Errorf("router: listen on %s: %w", c.String("addr"), err)
				}
				fmt.Fprintf(c.App.ErrWriter, "router: %s → %d targets, %d producers, policy %s\n", ln.Addr(), len(targets), len(producers), pol)
				return router.NewServer(r, log).Serve(c.Context, ln)
			},
		}
	})
}

// httpURLs parses instance base URLs.
func httpURLs(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usageError{fmt.Errorf("router: target %q is not an http URL", a)}
		}
		out = append(out, u.String())
	}
	return out, nil
}
