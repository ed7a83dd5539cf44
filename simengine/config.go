package simengine

import (
	"cmp"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Version is the simulator's version, reported by GET /version as
// "mbench-sim-<Version>".
const Version = "0.1.0"

// Banner is printed on startup so no output of the sim is mistaken for vLLM.
const Banner = "SIMULATED ENGINE (mbench sim, a model of an engine, not vLLM)"

// Connector overhead models.
const (
	ConnectorNone     = "none"     // plain engine: no KV connector
	ConnectorConstant = "constant" // fixed framework cost per step (a no-op connector)
	ConnectorWalk     = "walk"     // ConnectorUs plus a cost per cached block (Mooncake-like set(cache.keys()) walk)
)

// Config describes one simulated engine. Zero fields take their defaults (see
// DefaultConfig). For the float fields whose default is not zero
// (StepBaseUs, PrefillTokenUs, DecodeSeqUs, Jitter) a negative value asks for
// an explicit zero, as net.Dialer.KeepAlive does.
type Config struct {
	Addr           string  // listen address, default 127.0.0.1:8000
	Model          string  // served model id, default "sim-model"
	StepLog        string  // engine_step.jsonl path, appended ("" = none)
	StepBaseUs     float64 // fixed cost per step in µs (default 2000)
	PrefillTokenUs float64 // cost per prefill token in the step in µs (default 1.0)
	DecodeSeqUs    float64 // cost per decoding sequence in the step in µs (default 30)
	TokenBudget    int     // max tokens per step; longer prefills are chunked (default 2048)
	MaxSeqs        int     // max running sequences (default 256)
	KVBlocks       int     // KV cache capacity in blocks (default 8192)
	BlockSize      int     // tokens per KV block (default 16)
	MaxModelLen    int     // max prompt+completion tokens per request (default and maximum KVBlocks*BlockSize)
	Connector      string  // "none" (default) | "constant" | "walk"
	ConnectorUs    float64 // constant per-step connector overhead in µs (constant, walk)
	WalkNsPerBlock float64 // walk: per-step cost in ns per block held in the prefix cache
	// Async models async scheduling: the CPU side (schedule + build_meta)
	// overlaps model execution, so step = max(execute, schedule+build_meta) +
	// update (+ get_finished).
	Async      bool
	Noise      float64 // sigma of a per-launch lognormal factor on step time, drawn from Seed
	Jitter     float64 // sigma of per-step lognormal noise on step time (default 0.02)
	ColdSteps  int     // the first ColdSteps steps after launch are ColdFactor× slower
	ColdFactor float64 // default 1 (no effect)
	// DriftPerRequest models a machine that slows as it works through a
	// sweep (seed 000's cold-vs-warm GPU): a step whose newest request is
	// the n-th the engine admitted since launch costs (1 + DriftPerRequest)^(n−1)
	// times the model: each run of the same length slows the next by the
	// same share. Counted in requests, not seconds, so the drift a sweep
	// sees is the one its schedule scripts, whatever the machine's speed.
	// 0 = no drift.
	DriftPerRequest float64
	// CrashAfterSteps makes the process exit with code 3 after this many
	// steps (fault injection); 0 = never.
	CrashAfterSteps int
	// APIKey, when set, makes every /v1 request carry "Authorization:
	// Bearer APIKey" or be refused 401, as vllm serve --api-key (or
	// VLLM_API_KEY) does; /health, /metrics and /version stay open.
	APIKey string
	// Fault makes every completion request fail one way (FaultHTTP500, …);
	// "" serves normally. With FaultEvery > 1 only every FaultEvery-th
	// request does (in arrival order), for partial failure rates.
	Fault      string
	FaultEvery int
	Seed       int64 // seeds the launch factor, jitter, generated text and pseudo-EOS
	// KVRole gives the sim a modelled KV connector (kv_producer, kv_consumer
	// or kv_both): it takes vLLM's kv_transfer_params for disaggregated
	// prefill and reports vllm:external_prefix_cache_* metrics. "" = none.
	KVRole string
	// KVTransferUsPerToken is the modelled cost of receiving one token's KV
	// from a prefill instance (µs), paid before the request is queued.
	KVTransferUsPerToken float64
	// KVConnector is the protocol of the modelled connector:
	// KVConnectorNixl ("" too: the prefill answers kv_transfer_params, pd.go)
	// or KVConnectorMooncake (vLLM's bootstrap protocol, mooncake.go).
	KVConnector string
	// BootstrapAddr is where a MooncakeConnector producer (kv_producer,
	// kv_both) serves its bootstrap server; "" = Addr's host and
	// DefaultBootstrapPort.
	BootstrapAddr string
	// MooncakeAbortTimeout bounds how long a MooncakeConnector producer
	// waits for a request's two legs to meet (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT;
	// default DefaultMooncakeAbortTimeout).
	MooncakeAbortTimeout time.Duration
	// MooncakeRegisterDelay is how long after a MooncakeConnector
	// producer's bootstrap server listens its worker registers; until then
	// GET /query answers {} (0: at once).
	MooncakeRegisterDelay time.Duration
	// PromptTokensDetails adds usage.prompt_tokens_details.cached_tokens to
	// every answer, as vLLM's --enable-prompt-tokens-details does.
	PromptTokensDetails bool
}

// DefaultConfig returns the defaults that New applies to zero fields.
func DefaultConfig() Config {
	return Config{
		Addr:           "127.0.0.1:8000",
		Model:          "sim-model",
		StepBaseUs:     2000,
		PrefillTokenUs: 1.0,
		DecodeSeqUs:    30,
		TokenBudget:    2048,
		MaxSeqs:        256,
		KVBlocks:       8192,
		BlockSize:      16,
		Connector:      ConnectorNone,
		Jitter:         0.02,
		ColdFactor:     1,
	}
}

// withDefaults fills zero fields and maps the negative "explicit zero" floats
// to 0. It does not validate.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Addr = cmp.Or(c.Addr, d.Addr)
	c.Model = cmp.Or(c.Model, d.Model)
	for _, p := range []struct {
		v   *float64
		def float64
	}{
		{&c.StepBaseUs, d.StepBaseUs}, {&c.PrefillTokenUs, d.PrefillTokenUs},
		{&c.DecodeSeqUs, d.DecodeSeqUs}, {&c.Jitter, d.Jitter},
	} {
		switch {
		case *p.v == 0:
			*p.v = p.def
		case *p.v < 0:
			*p.v = 0
		}
	}
	c.TokenBudget = cmp.Or(c.TokenBudget, d.TokenBudget)
	c.MaxSeqs = cmp.Or(c.MaxSeqs, d.MaxSeqs)
	c.KVBlocks = cmp.Or(c.KVBlocks, d.KVBlocks)
	c.BlockSize = cmp.Or(c.BlockSize, d.BlockSize)
	if c.MaxModelLen == 0 && c.KVBlocks > 0 && c.BlockSize > 0 {
		c.MaxModelLen = c.KVBlocks * c.BlockSize
	}
	c.Connector = cmp.Or(c.Connector, d.Connector)
	c.ColdFactor = cmp.Or(c.ColdFactor, d.ColdFactor)
	if c.KVConnector == KVConnectorMooncake {
		if c.BootstrapAddr == "" {
			host, _, _ := net.SplitHostPort(c.Addr)
			c.BootstrapAddr = net.JoinHostPort(host, strconv.Itoa(DefaultBootstrapPort))
		}
		c.MooncakeAbortTimeout = cmp.Or(c.MooncakeAbortTimeout, DefaultMooncakeAbortTimeout)
	}
	return c
}

// Validate reports the first invalid field, after defaults are applied, in
// words a user of `mbench sim` can act on.
func (c Config) Validate() error {
	c = c.withDefaults()
	floats := []struct {
		name string
		v    float64
	}{
		{"step-base-us", c.StepBaseUs}, {"prefill-token-us", c.PrefillTokenUs},
		{"decode-seq-us", c.DecodeSeqUs}, {"connector-us", c.ConnectorUs},
		{"walk-ns-per-block", c.WalkNsPerBlock}, {"noise", c.Noise},
		{"jitter", c.Jitter}, {"cold-factor", c.ColdFactor}, {"kv-transfer-us-per-token", c.KVTransferUsPerToken},
		{"drift-per-request", c.DriftPerRequest},
	}
	for _, f := range floats {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fmt.Errorf("%s: %v is invalid, want a finite number >= 0", f.name, f.v)
		}
	}
	if c.StepBaseUs+min(c.PrefillTokenUs, c.DecodeSeqUs) <= 0 {
		return fmt.Errorf("step-base-us: every step must take time: set it > 0 (or both prefill-token-us and decode-seq-us > 0)")
	}
	ints := []struct {
		name string
		v    int
	}{
		{"token-budget", c.TokenBudget}, {"max-seqs", c.MaxSeqs},
		{"kv-blocks", c.KVBlocks}, {"block-size", c.BlockSize}, {"max-model-len", c.MaxModelLen},
	}
	for _, f := range ints {
		if f.v < 1 {
			return fmt.Errorf("%s: %d is invalid, want an integer >= 1", f.name, f.v)
		}
	}
	if c.KVBlocks > 1<<26 || c.BlockSize > 1<<16 {
		return fmt.Errorf("kv-blocks %d × block-size %d is too large for the sim (max %d blocks, block size %d)",
			c.KVBlocks, c.BlockSize, 1<<26, 1<<16)
	}
	if c.MaxModelLen > c.KVBlocks*c.BlockSize {
		return fmt.Errorf("max-model-len: %d exceeds the KV cache capacity kv-blocks×block-size = %d tokens",
			c.MaxModelLen, c.KVBlocks*c.BlockSize)
	}
	if c.ColdSteps < 0 || c.CrashAfterSteps < 0 {
		return fmt.Errorf("cold-steps (%d) and crash-after-steps (%d) must be >= 0", c.ColdSteps, c.CrashAfterSteps)
	}
	if c.ColdFactor == 0 {
		return fmt.Errorf("cold-factor: must be > 0")
	}
	if c.FaultEvery < 0 || (c.FaultEvery > 0 && c.Fault == FaultNone) {
		return fmt.Errorf("fault-every: must be ≥ 0, and needs a fault, got %d with fault %q", c.FaultEvery, c.Fault)
	}
	if c.Fault != FaultNone && !slices.Contains(Faults, c.Fault) {
		return fmt.Errorf("fault: unknown %q, want one of %s", c.Fault, strings.Join(Faults, ", "))
	}
	if err := c.validKV(); err != nil {
		return err
	}
	return c.validConnector()
}

// validKV checks the disaggregated-serving fields: the KV role and the KV
// connector's protocol.
func (c Config) validKV() error {
	switch c.KVRole {
	case KVRoleNone, KVRoleProducer, KVRoleConsumer, KVRoleBoth:
	default:
		return fmt.Errorf("kv-role: unknown %q, want kv_producer, kv_consumer or kv_both", c.KVRole)
	}
	switch c.KVConnector {
	case "", KVConnectorNixl:
	case KVConnectorMooncake:
		if c.KVRole == KVRoleNone {
			return fmt.Errorf("kv-connector: %s needs a kv-role (kv_producer, kv_consumer or kv_both)", c.KVConnector)
		}
		if c.MooncakeRegisterDelay < 0 {
			return fmt.Errorf("mooncake register delay: must be ≥ 0, got %s", c.MooncakeRegisterDelay)
		}
		if c.MooncakeAbortTimeout < 0 {
			return fmt.Errorf("mooncake-abort-timeout: must be > 0, got %s", c.MooncakeAbortTimeout)
		}
	default:
		return fmt.Errorf("kv-connector: unknown %q, want %s or %s", c.KVConnector, KVConnectorNixl, KVConnectorMooncake)
	}
	return nil
}

// validConnector checks the connector overhead model (its cost per step).
func (c Config) validConnector() error {
	switch c.Connector {
	case ConnectorNone:
		if c.ConnectorUs > 0 || c.WalkNsPerBlock > 0 {
			return fmt.Errorf("connector: %q ignores connector-us/walk-ns-per-block; use --connector constant or walk", c.Connector)
		}
	case ConnectorConstant:
		if c.WalkNsPerBlock > 0 {
			return fmt.Errorf("walk-ns-per-block: only used with --connector walk, not %q", c.Connector)
		}
	case ConnectorWalk:
	default:
		return fmt.Errorf("connector: unknown %q, want none, constant or walk", c.Connector)
	}
	return nil
}

// describe renders the model parameters on one line, for the engine's log.
func (c Config) describe() string {
	return fmt.Sprintf("step_base_us=%g prefill_token_us=%g decode_seq_us=%g token_budget=%d max_seqs=%d "+
		"kv_blocks=%d block_size=%d max_model_len=%d connector=%s connector_us=%g walk_ns_per_block=%g async=%t "+
		"noise=%g jitter=%g cold_steps=%d cold_factor=%g drift_per_request=%g crash_after_steps=%d seed=%d kv_role=%q kv_transfer_us_per_token=%g kv_connector=%q",
		c.StepBaseUs, c.PrefillTokenUs, c.DecodeSeqUs, c.TokenBudget, c.MaxSeqs, c.KVBlocks, c.BlockSize, c.MaxModelLen,
		c.Connector, c.ConnectorUs, c.WalkNsPerBlock, c.Async, c.Noise, c.Jitter, c.ColdSteps, c.ColdFactor,
		c.DriftPerRequest, c.CrashAfterSteps, c.Seed, c.KVRole, c.KVTransferUsPerToken, c.KVConnector)
}
