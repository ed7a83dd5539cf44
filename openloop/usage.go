package openloop

import "fmt"

// What a stream that ended with [DONE] must still show to count as a
// completed request. vLLM's own benchmark client counts a 200 response as
// a success once a chunk carried choices, whatever its text, and fails it
// otherwise ("Never received a valid chunk to calculate TTFT",
// vllm/benchmarks/lib/endpoint_request_func.py at vLLM commit b36adfa3 (in 0.18.1), lines
// 221–249). mbench asks in addition that the engine produced something: a
// content token, or — for a natural end that streamed no text, such as
// llama-server's one-token answer whose end-of-generation token streams as
// empty text (tools/server/server-context.cpp:1865-1877 at 80fb11ac) — a
// usage completion_tokens of at least 1, or, without usage, a finish
// reason. A stream of only empty chunks that the engine's own usage counts
// as 0 tokens is empty_stream.
//
// The usage chunk is checked against what was streamed and what was asked
// for. No request may get more than its max_tokens (with fixed lengths it
// asks for exactly max_tokens = min_tokens with ignore_eos; with
// Request.NaturalLength max_tokens is a cap), and every content chunk
// carries at least one token, so a completion_tokens below the content
// chunks or above max_tokens cannot be true: the request fails as usage_mismatch rather than carry a false token
// count into TPOT and output throughput. More tokens than chunks is normal
// (a chunk may carry several tokens); fewer tokens than asked for is a
// natural end (or, with fixed lengths, an engine that cut the output short:
// counted per run from Record.MaxTokens and Record.FinishReason, and judged
// by the run's verdict) rather than a failure. A stream without a usage chunk is marked
// (Record.UsageMissing): vLLM's client then recounts the tokens of the text
// with the tokenizer (vllm/benchmarks/serve.py at vLLM commit b36adfa3, in
// 0.18.1, lines 427–440), which mbench does not have, so OutputTokens counts content
// chunks and the run says so.

// check is the class and text of a failure that a stream ended with [DONE]
// still shows ("" when it has none); maxTokens is what the request asked
// for (0: unknown).
func (st *streamState) check(maxTokens int) (ErrorClass, string) {
	produced := st.chunks > 0 || (st.haveUsage && st.usageOut > 0) || (!st.haveUsage && st.finish != "")
	switch {
	case st.choices == 0 && st.haveUsage:
		return ErrClassEmptyStream, fmt.Sprintf("the stream ended with [DONE] and no chunk with choices (usage completion_tokens %d)", st.usageOut)
	case st.choices == 0:
		return ErrClassEmptyStream, "the stream ended with [DONE] and no chunk with choices"
	case !produced && st.haveUsage:
		return ErrClassEmptyStream, fmt.Sprintf("the stream ended with [DONE] after %d chunks with empty text and usage completion_tokens %d: the engine produced nothing", st.choices, st.usageOut)
	case !produced:
		return ErrClassEmptyStream, fmt.Sprintf("the stream ended with [DONE] after %d chunks with empty text, no finish reason and no usage: the engine produced nothing", st.choices)
	case st.haveUsage && st.usageOut < st.chunks:
		return ErrClassUsageMismatch, fmt.Sprintf("usage completion_tokens %d is fewer than the %d content chunks streamed", st.usageOut, st.chunks)
	case st.haveUsage && maxTokens > 0 && st.usageOut > maxTokens:
		return ErrClassUsageMismatch, fmt.Sprintf("usage completion_tokens %d is more than the max_tokens %d asked for (%d content chunks streamed)", st.usageOut, maxTokens, st.chunks)
	}
	return "", ""
}
