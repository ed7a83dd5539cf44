package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/mbench/mbench/router"
	"github.com/urfave/cli/v2"
)

func routerCommand() *cli.Command {
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
			&cli.StringFlag{Name: "cache-blocks", Value: "auto", Usage: "bound each instance's prefix index to this many blocks, LRU (auto = each engine's KV capacity from its /metrics, vllm:cache_config_info, unbounded where it reports none; 0 = unbounded)"},
			&cli.StringFlag{Name: "load", Usage: "what counts as an instance's load: engine (the engine's waiting + running from its /metrics, polled every 100 ms; lmetric's default, its BS = that + 1) or shadow (the router's requests in flight; the other policies' default)"},
			&cli.BoolFlag{Name: "offload", Usage: "elastic offload: prefill HEAVY requests on another instance, decode on the sticky one"},
			&cli.IntFlag{Name: "heavy-threshold", Value: 20000, Usage: "offload requests with at least this many new tokens (a class bound's rule: 20000 new tokens is HEAVY, and offloaded)"},
			&cli.IntFlag{Name: "max-offload", Value: 4, Usage: "offloaded prefills in flight at most"},
			&cli.StringSliceFlag{Name: "prefill", Usage: "PD-separated: a producer (prefill) instance URL; repeat per instance; the targets decode"},
			&cli.StringFlag{Name: "class-bounds", Value: "5000,20000,50000", Usage: "request classes of the routing log and /breakdown by estimated new tokens: WARM < a, MEDIUM < b, HEAVY < c, HEAVY+ (a matrix passes its class_bounds as {{.ClassBounds}})"},
			&cli.StringFlag{Name: "kv-protocol", Value: string(router.ProtocolNIXL), Usage: "how a split request (--offload, --prefill) reaches vLLM's KV connector: nixl (prefill, then decode with the prefill's kv_transfer_params: NixlConnector) or mooncake (both legs at once, the decode naming the producer's bootstrap server: MooncakeConnector since vLLM PR #31034)"},
			&cli.StringFlag{Name: "bootstrap-ports", Usage: "mooncake: the bootstrap port (VLLM_MOONCAKE_BOOTSTRAP_PORT) of each instance prefills may run on — the --prefill producers, else every target — comma-separated in their order (default 8998 each; a matrix passes {{.BootstrapPorts}})"},
			&cli.StringFlag{Name: "log", Usage: "append every routing decision to this JSONL file"},
		},
		Action: routerAction,
	}
}

// routerAction serves the router until c's context ends.
func routerAction(c *cli.Context) error {
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
	r, pol, err := newRouter(c, targets, producers)
	if err != nil {
		return err
	}
	proto, err := router.ParseProtocol(c.String("kv-protocol"))
	if err != nil {
		return usageError{fmt.Errorf("router: --%w", err)}
	}
	var ports []int
	if v := c.String("bootstrap-ports"); v != "" {
		if ports, err = intList(v, 0); err != nil {
			return usageError{fmt.Errorf("router: --bootstrap-ports: %w", err)}
		}
	}
	log := router.NewLog(nil)
	if p := c.String("log"); p != "" {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("router: --log: %w", err)
		}
		defer f.Close()
		log = router.NewLog(f)
	}
	ln, err := net.Listen("tcp", c.String("addr"))
	if err != nil {
		return fmt.Errorf("router: listen on %s: %w", c.String("addr"), err)
	}
	srv, err := router.NewServer(r, log, router.ServerOptions{Protocol: proto, BootstrapPorts: ports, Messages: c.App.ErrWriter})
	if err != nil {
		ln.Close()
		return usageError{fmt.Errorf("router: %w", err)}
	}
	fmt.Fprintf(c.App.ErrWriter, "router: %s → %d targets, %d producers, policy %s, kv protocol %s\n", ln.Addr(), len(targets), len(producers), pol, proto)
	return srv.Serve(c.Context, ln)
}

// newRouter makes the router the command's flags describe, and returns
// its policy.
func newRouter(c *cli.Context, targets, producers []string) (*router.Router, router.Policy, error) {
	pol, err := router.ParsePolicy(c.String("policy"))
	if err != nil {
		return nil, "", usageError{fmt.Errorf("router: --%w", err)}
	}
	if c.Bool("offload") && len(producers) > 0 {
		return nil, "", usageError{errors.New("router: --offload and --prefill exclude each other (elastic offload is for combined instances)")}
	}
	bounds, err := intList(c.String("class-bounds"), 3)
	if err != nil {
		return nil, "", usageError{fmt.Errorf("router: --class-bounds: %w", err)}
	}
	cacheBlocks, fromEngine := 0, c.String("cache-blocks") == "auto"
	if !fromEngine {
		if cacheBlocks, err = strconv.Atoi(c.String("cache-blocks")); err != nil || cacheBlocks < 0 {
			return nil, "", usageError{fmt.Errorf("router: --cache-blocks: %q is not a block count or auto", c.String("cache-blocks"))}
		}
	}
	var load router.LoadSource // "": the policy's default
	if v := c.String("load"); v != "" {
		if load, err = router.ParseLoadSource(v); err != nil {
			return nil, "", usageError{fmt.Errorf("router: --%w", err)}
		}
	}
	r, err := router.New(targets, producers, router.Options{Policy: pol, Alpha: c.Float64("alpha"),
		OverrideFactor: c.Float64("override-factor"), BlockTokens: c.Int("block-tokens"),
		CacheBlocks: cacheBlocks, CacheFromEngine: fromEngine, Load: load, Offload: c.Bool("offload"),
		HeavyTokens: c.Int("heavy-threshold"), MaxOffload: c.Int("max-offload"),
		Classes: [3]int(bounds)})
	if err != nil {
		return nil, "", usageError{fmt.Errorf("router: %w", err)}
	}
	return r, pol, nil
}

// intList parses a comma-separated list of n positive integers (n = 0: any
// number).
func intList(s string, n int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	if n > 0 && len(out) != n {
		return nil, fmt.Errorf("%d values given, want %d", len(out), n)
	}
	return out, nil
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
