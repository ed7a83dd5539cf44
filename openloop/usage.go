package openloop

import "fmt"

// What a stream that ended with [DONE] must still show to count as a
// completed request. vLLM's own benchmark client fails a 200 response that
// never carried a chunk with choices ("Never received a valid chunk to
// calculate TTFT", vllm/benchmarks/lib/endpoint_request_func.py at commit
// 02cfb534, lines 250–257); mbench asks for a content token (non-empty text
// or delta.content), the event its TTFT is measured to, so a stream of only
// empty chunks fails too.
//
// The usage chunk is checked against what was streamed and what was asked
// for. No request may get more than its max_tokens (with fixed lengths it
// asks for exactly max_tokens = min_tokens with ignore_eos; with
// Request.NaturalLength max_tokens is a cap), and every content chunk
// carries at least one token, so a completion_tokens below the content
// chunks or above max_tokens cannot be true: the request fails as usage_mismatch rather than carry a false token
// count into TPOT and output throughput. More tokens than chunks is normal
// (a chunk may carry several tokens); with fixed lengths, fewer tokens than
// asked for is an engine that stopped early, counted per run
// (Record.MaxTokens) rather than failed. A stream without a usage chunk is marked
// (Record.UsageMissing): vLLM's client then recounts the tokens of the text
// with the tokenizer (vllm/benchmarks/serve.py at vLLM commit b36adfa3, in
// 0.18.1, lines 427–440), which mbench does not have, so OutputTokens counts content
// chunks and the run says so.

// check is the class and text of a failure that a stream ended with [DONE]
// still shows ("" when it has none); maxTokens is what the request asked
// for (0: unknown).
func (st *streamState) check(maxTokens int) (ErrorClass, string) {
	switch {
	case st.chunks == 0 && st.haveUsage:
		return ErrClassEmptyStream, fmt.Sprintf("the stream ended with [DONE] and no content token (usage completion_tokens %d)", st.usageOut)
	case st.chunks == 0:
		return ErrClassEmptyStream, "the stream ended with [DONE] and no content token"
	case st.haveUsage && st.usageOut < st.chunks:
		return ErrClassUsageMismatch, fmt.Sprintf("usage completion_tokens %d is fewer than the %d content chunks streamed", st.usageOut, st.chunks)
	case st.haveUsage && maxTokens > 0 && st.usageOut > maxTokens:
		return ErrClassUsageMismatch, fmt.Sprintf("usage completion_tokens %d is more than the max_tokens %d asked for (%d content chunks streamed)", st.usageOut, maxTokens, st.chunks)
	}
	return "", ""
}
