// Package simengine is a simulated, vLLM-compatible LLM serving engine: a
// MODEL of an engine, not vLLM. It serves vLLM's OpenAI HTTP surface
// (/health, /v1/models, streaming /v1/completions and
// /v1/chat/completions (chat.go), /metrics with vllm: names,
// /version) from one step loop that does continuous batching in real
// wall-clock time: a token budget per step with chunked prefill, one decode
// token per running sequence per step, a paged KV cache of fixed capacity with
// a hash-chained prefix cache and LRU eviction, recompute preemption, and a
// per-step KV-connector overhead model (none, constant, or a Mooncake-like walk
// over the cached blocks). Every step is appended to engine_step.jsonl.
//
// It is the embedded default engine of mbench sweeps, tests and demos, and it
// says so everywhere it appears: a startup banner, owned_by "mbench-sim" in
// /v1/models, the X-Mbench-Simulated response header, mbench_sim_info in
// /metrics, and "simulated": true in /version.
//
// The package owns the simulation model, its HTTP surface and the sim's
// engine_step.jsonl writer. It imports nothing else of mbench.
package simengine
