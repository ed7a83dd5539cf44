package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/mbench/mbench/simengine"
	"github.com/urfave/cli/v2"
)

func simCommand() *cli.Command {
	d := simengine.DefaultConfig()
	return &cli.Command{
		Name:  "sim",
		Usage: "run the SIMULATED engine (a model of a vLLM-like engine, not vLLM) until SIGTERM",
		Description: "Serves vLLM's HTTP surface (/health, /v1/models, /v1/completions, /metrics) from a\n" +
			"continuous-batching step model in real time, and appends one line per step to --step-log.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "addr", Value: d.Addr, Usage: "listen address host:port"},
			&cli.StringFlag{Name: "step-log", Usage: "append engine_step.jsonl lines to this `FILE`"},
			&cli.StringFlag{Name: "model", Value: d.Model, Usage: "served model id"},
			&cli.Float64Flag{Name: "step-base-us", Value: d.StepBaseUs, Usage: "fixed cost per step (µs)"},
			&cli.Float64Flag{Name: "prefill-token-us", Value: d.PrefillTokenUs, Usage: "cost per prefill token in a step (µs)"},
			&cli.Float64Flag{Name: "decode-seq-us", Value: d.DecodeSeqUs, Usage: "cost per decoding sequence in a step (µs)"},
			&cli.IntFlag{Name: "token-budget", Value: d.TokenBudget, Usage: "max tokens per step (chunked prefill)"},
			&cli.IntFlag{Name: "max-seqs", Value: d.MaxSeqs, Usage: "max running sequences"},
			&cli.IntFlag{Name: "kv-blocks", Value: d.KVBlocks, Usage: "KV cache capacity in blocks"},
			&cli.IntFlag{Name: "block-size", Value: d.BlockSize, Usage: "tokens per KV block"},
			&cli.IntFlag{Name: "max-model-len", Usage: "max prompt+completion tokens (default kv-blocks×block-size)"},
			&cli.StringFlag{Name: "connector", Value: d.Connector, Usage: "KV connector overhead model: none, constant or walk"},
			&cli.Float64Flag{Name: "connector-us", Usage: "constant connector overhead per step (µs), e.g. 16 for a no-op connector"},
			&cli.Float64Flag{Name: "walk-ns-per-block", Usage: "walk connector: cost per cached block per step (ns)"},
			&cli.BoolFlag{Name: "async", Usage: "async scheduling: CPU-side schedule+connector overlaps execution"},
			&cli.Float64Flag{Name: "noise", Usage: "sigma of the per-launch lognormal step-time factor (drawn from --seed)"},
			&cli.Float64Flag{Name: "jitter", Value: d.Jitter, Usage: "sigma of the per-step lognormal step-time noise"},
			&cli.IntFlag{Name: "cold-steps", Usage: "the first N steps after launch are --cold-factor× slower"},
			&cli.Float64Flag{Name: "cold-factor", Value: d.ColdFactor, Usage: "slowdown of the cold steps"},
			&cli.Float64Flag{Name: "drift-per-request", Usage: "drift: step time grows by this fraction per request admitted since launch, compounding (models a GPU warming over a sweep, in requests rather than seconds so a sweep's drift does not depend on the machine's speed)"},
			&cli.IntFlag{Name: "crash-after-steps", Usage: "fault injection: exit with code 3 after N steps"},
			&cli.StringFlag{Name: "api-key", EnvVars: []string{"VLLM_API_KEY"}, Usage: "refuse /v1 requests without Authorization: Bearer KEY (401), as vllm serve --api-key; the flag, else VLLM_API_KEY"},
			&cli.StringFlag{Name: "fault", Usage: "fault injection: fail every completion request: http500, http429, malformed, truncate, hang, empty (no content token), no_usage or bad_usage (50× the tokens)"},
			&cli.IntFlag{Name: "fault-every", Usage: "with --fault: only every Nth completion request (a partial failure rate)"},
			&cli.Int64Flag{Name: "seed", Usage: "seed of the launch factor, jitter and generated text"},
			&cli.StringFlag{Name: "kv-role", Usage: "a modelled KV connector for disaggregated prefill: kv_producer, kv_consumer or kv_both (takes vLLM's kv_transfer_params)"},
			&cli.Float64Flag{Name: "kv-transfer-us-per-token", Usage: "modelled cost of receiving one token's KV from a prefill instance (µs)"},
			&cli.StringFlag{Name: "kv-connector", Value: simengine.KVConnectorNixl, Usage: "protocol of the modelled KV connector: NixlConnector (the prefill answers kv_transfer_params) or MooncakeConnector (vLLM 0.18's bootstrap protocol: a bootstrap server on producers, concurrent legs paired by their kv_transfer_params.transfer_id)"},
			&cli.BoolFlag{Name: "enable-prompt-tokens-details", Usage: "report usage.prompt_tokens_details.cached_tokens, as vLLM's flag of the same name"},
			&cli.IntFlag{Name: "bootstrap-port", Value: envInt("VLLM_MOONCAKE_BOOTSTRAP_PORT", simengine.DefaultBootstrapPort), Usage: "MooncakeConnector producer: the bootstrap server's port on --addr's host (default $VLLM_MOONCAKE_BOOTSTRAP_PORT, else 8998, as vLLM)"},
			&cli.DurationFlag{Name: "mooncake-abort-timeout", Value: time.Duration(envInt("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", int(simengine.DefaultMooncakeAbortTimeout/time.Second))) * time.Second, Usage: "MooncakeConnector: how long a producer waits for a request's two legs to meet (default $VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT seconds, else 480 s, as vLLM)"},
			&cli.DurationFlag{Name: "mooncake-register-delay", Usage: "MooncakeConnector producer: how long after its bootstrap server listens the worker registers; until then GET /query answers {}, as vLLM's does while its workers start (default at once)"},
		},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error { return usageError{err} },
		Action: func(c *cli.Context) error {
			cfg, err := simConfig(c)
			if err != nil {
				return err
			}
			return simengine.ListenAndServe(c.Context, cfg, c.App.Writer)
		},
	}
}

// simConfig is the engine the command's flags describe, checked.
func simConfig(c *cli.Context) (simengine.Config, error) {
	if c.NArg() > 0 {
		return simengine.Config{}, usageError{fmt.Errorf("sim: unexpected argument %q (all settings are flags)", c.Args().First())}
	}
	cfg := simengine.Config{
		Addr: c.String("addr"), Model: c.String("model"), StepLog: c.String("step-log"),
		StepBaseUs: explicit(c.Float64("step-base-us")), PrefillTokenUs: explicit(c.Float64("prefill-token-us")),
		DecodeSeqUs: explicit(c.Float64("decode-seq-us")), TokenBudget: c.Int("token-budget"),
		MaxSeqs: c.Int("max-seqs"), KVBlocks: c.Int("kv-blocks"), BlockSize: c.Int("block-size"),
		MaxModelLen: c.Int("max-model-len"), Connector: c.String("connector"),
		ConnectorUs: c.Float64("connector-us"), WalkNsPerBlock: c.Float64("walk-ns-per-block"),
		Async: c.Bool("async"), Noise: c.Float64("noise"), Jitter: explicit(c.Float64("jitter")),
		ColdSteps: c.Int("cold-steps"), ColdFactor: c.Float64("cold-factor"),
		CrashAfterSteps: c.Int("crash-after-steps"), Fault: c.String("fault"), FaultEvery: c.Int("fault-every"), Seed: c.Int64("seed"),
		APIKey:          c.String("api-key"),
		DriftPerRequest: c.Float64("drift-per-request"), KVRole: c.String("kv-role"),
		KVTransferUsPerToken: c.Float64("kv-transfer-us-per-token"),
		KVConnector:          c.String("kv-connector"), MooncakeAbortTimeout: c.Duration("mooncake-abort-timeout"),
		MooncakeRegisterDelay: c.Duration("mooncake-register-delay"),
	}
	if cfg.KVConnector == simengine.KVConnectorMooncake {
		host, _, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return simengine.Config{}, usageError{fmt.Errorf("sim: --addr: %w", err)}
		}
		cfg.BootstrapAddr = net.JoinHostPort(host, strconv.Itoa(c.Int("bootstrap-port")))
	}
	// A zero Config field means "default"; on the command line 0 is a mistake.
	for _, f := range []string{"token-budget", "max-seqs", "kv-blocks", "block-size"} {
		if c.IsSet(f) && c.Int(f) == 0 {
			return simengine.Config{}, usageError{fmt.Errorf("sim: --%s: 0 is invalid, want an integer >= 1", f)}
		}
	}
	if c.IsSet("cold-factor") && c.Float64("cold-factor") == 0 {
		return simengine.Config{}, usageError{fmt.Errorf("sim: --cold-factor: 0 is invalid, want a number > 0")}
	}
	if err := cfg.Validate(); err != nil {
		return simengine.Config{}, usageError{fmt.Errorf("sim: --%w", err)}
	}
	return cfg, nil
}

// envInt is the integer value of env var name, or def when it is unset or
// not an integer.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// explicit maps a flag value of 0 to simengine's "explicit zero" (a negative
// value): a zero Config field would take the default instead.
func explicit(v float64) float64 {
	if v == 0 {
		return -1
	}
	return v
}
