// Package engines owns what mbench knows about each kind of engine it
// measures, as one Profile per kind: how it says it is ready, which of its
// /metrics series are the running and waiting requests, the prefix-cache
// hits and lookups and the KV-cache usage, where it says its version and
// its vocabulary size, whether it writes the per-step log
// (engine_step.jsonl), whether an instance may run without a GPU, and what
// reports call it. Everything else — launching, the OpenAI streaming API,
// the probes — is the same for every kind, so another OpenAI-compatible
// server (SGLang, TGI) is one more row of the table below.
package engines

import (
	"fmt"
	"slices"

	"github.com/mbench/mbench/probes"
)

// Kind is an engine kind as the matrix names it (engine.kind).
type Kind string

// The engine kinds.
const (
	VLLM     Kind = "vllm"     // vLLM's `vllm serve`
	LlamaCpp Kind = "llamacpp" // llama.cpp's llama-server
	Sim      Kind = "sim"      // mbench's simulated engine: a model of an engine, not vLLM
)

// StepLog says when an engine kind writes engine_step.jsonl.
type StepLog int

// When a kind writes the per-step log.
const (
	StepLogNever        StepLog = iota // no per-step log exists for the kind
	StepLogInstrumented                // with engine.instrument (vLLM: the mbench_vllm plugin)
	StepLogAlways                      // always (the simulated engine)
)

// Field is a value an engine serves as JSON: GET Path, then the value at
// Key, a dot-separated path of object keys and array indexes ("" = none).
type Field struct {
	Path, Key string
}

// IsZero reports whether the engine serves no such value.
func (f Field) IsZero() bool { return f.Path == "" }

func (f Field) String() string {
	if f.IsZero() {
		return "none"
	}
	return "GET " + f.Path + " ." + f.Key
}

// Profile is what mbench knows about one engine kind.
type Profile struct {
	Kind Kind
	Name string // as reports and errors name it
	// ReadyPath answers 200 once the engine can serve (503 while loading).
	ReadyPath string
	// Metrics names its /metrics series (probes.MetricNames).
	Metrics probes.MetricNames
	// Version is where it says its version (recorded in the sweep's
	// fingerprint; a change between runs stops the sweep).
	Version Field
	// Vocab is where it says its vocabulary size, which prompt token ids
	// must stay below.
	Vocab Field
	// StepLog is when it writes engine_step.jsonl.
	StepLog StepLog
	// CPUOnly: an instance may have gpus_per_instance 0.
	CPUOnly bool
	// PinGPUs: an instance's GPUs are set as CUDA_VISIBLE_DEVICES (outside
	// Slurm, which binds a step's GPUs itself).
	PinGPUs bool
	// Simulated: it is mbench's model of an engine, and every file says so.
	Simulated bool
}

// profiles is the table: one row per kind.
//
// llama-server's facts are read in llama.cpp's tools/server sources as
// node-llama-cpp@3.21.1 ships them (llama/gitRelease.bundle, commit
// 80fb11ac, "version: 0.4.0-dev (build 1, commit 80fb11a)"):
//   - every path, /health included, answers 503 {"error":{"message":
//     "Loading model"}} until the model is loaded (server-http.cpp:253-272,
//     middleware_server_state); /health then answers 200;
//   - /metrics (with --metrics) renders, in server-task.cpp:1523-1615
//     (server_task_result_metrics::to_metrics), the gauges
//     llamacpp:requests_processing (slots processing) and
//     llamacpp:requests_deferred (tasks deferred for want of a free slot),
//     and the counters llamacpp:prompt_tokens_total ("prompt tokens
//     processed, excluding cached tokens") and
//     llamacpp:prompt_tokens_cached_total ("prompt tokens reused from the
//     cache"). The cached count grows by a slot's reused prefix when its
//     prompt starts (server-context.cpp:3394-3396, metrics.add_prompt_cached
//     (n_past)); the processed count by every prompt batch
//     (server-context.cpp:4050, metrics.add_prompt). So a request's lookups
//     are its cached plus its processed prompt tokens: queries = hits +
//     prompt_tokens_total. It exports no KV-cache usage gauge and no
//     preemption counter;
//   - GET /props says "build_info" ("b1-80fb11a"; server-context.cpp:4617);
//   - GET /v1/models says data[0].meta.n_vocab (server-context.cpp:4537-4539),
//     and the server refuses a prompt id ≥ n_vocab with HTTP 400
//     (server-common.cpp:767, server_tokens::validate);
//   - every response's usage carries prompt_tokens_details.cached_tokens
//     (server-task.cpp:370).
var profiles = []Profile{
	{Kind: VLLM, Name: "vLLM", ReadyPath: "/health", Metrics: probes.VLLMMetrics,
		Version: Field{"/version", "version"}, StepLog: StepLogInstrumented, PinGPUs: true},
	{Kind: LlamaCpp, Name: "llama.cpp llama-server", ReadyPath: "/health",
		Metrics: probes.MetricNames{
			Running: []string{"llamacpp:requests_processing"},
			Waiting: []string{"llamacpp:requests_deferred"},
			Hits:    []string{"llamacpp:prompt_tokens_cached_total"},
			Misses:  []string{"llamacpp:prompt_tokens_total"},
			// Each slot's generation time and tokens, added when its
			// request ends (server-context.cpp:4113-4118,
			// metrics_on_prediction): the per-token time of its log's
			// "eval time".
			TokenSeconds: []string{"llamacpp:tokens_predicted_seconds_total"},
			Tokens:       []string{"llamacpp:tokens_predicted_total"},
		},
		Version: Field{"/props", "build_info"}, Vocab: Field{"/v1/models", "data.0.meta.n_vocab"},
		StepLog: StepLogNever, CPUOnly: true, PinGPUs: true},
	{Kind: Sim, Name: "simulated engine (mbench sim)", ReadyPath: "/health", Metrics: probes.VLLMMetrics,
		Version: Field{"/version", "version"}, StepLog: StepLogAlways, CPUOnly: true, Simulated: true},
}

// Kinds lists the kinds, in table order.
func Kinds() []Kind {
	out := make([]Kind, len(profiles))
	for i, p := range profiles {
		out[i] = p.Kind
	}
	return out
}

// Lookup returns the profile of kind.
func Lookup(kind Kind) (Profile, error) {
	i := slices.IndexFunc(profiles, func(p Profile) bool { return p.Kind == kind })
	if i < 0 {
		return Profile{}, fmt.Errorf("unknown engine kind %q (valid: %v)", kind, Kinds())
	}
	return profiles[i], nil
}

// Of is Lookup for a kind known to be valid (a parsed matrix's): an
// unknown kind gets the vLLM profile, the harness's original default.
func Of(kind Kind) Profile {
	p, err := Lookup(kind)
	if err != nil {
		return profiles[0]
	}
	return p
}

// WritesSteps reports whether an instance writes engine_step.jsonl when
// the matrix sets engine.instrument to instrument.
func (p Profile) WritesSteps(instrument bool) bool {
	return p.StepLog == StepLogAlways || (p.StepLog == StepLogInstrumented && instrument)
}
