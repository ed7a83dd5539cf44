package openloop

import (
	"cmp"
	"math/rand/v2"
	"slices"
)

// TraceBlockTokens is the number of tokens behind one Mooncake hash id.
const TraceBlockTokens = 512

// promptGen draws the prompts of a run. Every prompt is a pure function of
// (seed, request index): lengths, prefix group and tokens come from separate
// seeded streams, so request i is the same whatever else the run does.
type promptGen struct {
	seed   int64
	shape  Shape
	tokens TokenRange    // ids drawn from; unset = DefaultTokenRange
	items  []DatasetItem // Shape.Dataset's prompts
}

// dataset returns the prompt and output length of dataset request i: item
// k drawn uniformly (with replacement) from the seed's stream, so the
// sample is a pure function of (seed, i).
func (g *promptGen) dataset(i int) (prompt string, output int) {
	it := &g.items[streamRNG(g.seed, saltDataset, uint64(i)).IntN(len(g.items))]
	return it.Prompt, cmp.Or(g.shape.Output, it.Output)
}

// open returns the prompt tokens (appended to dst[:0]), the output length and
// the 1-based prefix group (0 = none) of open-loop request i.
func (g *promptGen) open(i int, dst []int32) (tokens []int32, output, group int) {
	s := &g.shape
	lr := streamRNG(g.seed, saltLengths, uint64(i))
	input := s.Input
	if s.InputDist != nil {
		input = s.InputDist.Sample(lr)
	}
	output = s.Output
	if s.OutputDist != nil {
		output = s.OutputDist.Sample(lr)
	}
	dst = dst[:0]
	if p := s.Prefix; p != nil {
		gi := lr.IntN(p.NumPrefixes)
		group = gi + 1
		input = max(input, p.PrefixTokens)
		dst = g.appendRandomTokens(dst, streamRNG(g.seed, saltPrefix, uint64(gi)), p.PrefixTokens)
	}
	dst = g.appendRandomTokens(dst, streamRNG(g.seed, saltTokens, uint64(i)), input-len(dst))
	return dst, output, group
}

// fill returns the prompt of cache-fill request k: PrefixTokens tokens from a
// stream no measured prompt draws from.
func (g *promptGen) fill(k int, dst []int32) []int32 {
	return g.appendRandomTokens(dst[:0], streamRNG(g.seed, saltFill, uint64(k)), g.shape.CacheFill.PrefixTokens)
}

// trace returns the prompt of trace request idx: one 512-token block per hash
// id, each block a pure function of (seed, id), so equal ids give identical
// blocks; the last block is cut to input_length. Tokens beyond the hash ids
// (a trace that lists fewer blocks than its input needs) are unique to the
// request.
func (g *promptGen) trace(idx int, tr *TraceRequest, dst []int32) []int32 {
	dst = dst[:0]
	for _, h := range tr.HashIDs {
		n := min(TraceBlockTokens, tr.InputLength-len(dst))
		if n <= 0 {
			break
		}
		dst = g.appendRandomTokens(dst, streamRNG(g.seed, saltBlock, uint64(h)), n)
	}
	if rest := tr.InputLength - len(dst); rest > 0 {
		dst = g.appendRandomTokens(dst, streamRNG(g.seed, saltTracePad, uint64(idx)), rest)
	}
	return dst
}

// appendRandomTokens appends n token ids drawn uniformly from g's range
// (with DefaultTokenRange, exactly the ids drawn before ranges existed).
func (g *promptGen) appendRandomTokens(dst []int32, r *rand.Rand, n int) []int32 {
	t := g.tokens.orDefault()
	lo, span := t.Min, t.Max-t.Min
	for range n {
		dst = append(dst, int32(lo+r.IntN(span)))
	}
	return dst
}

// appendCompletionBody appends the /v1/completions request body for a
// token-id prompt, without reflection:
//
//	{"model":M,"prompt":[ids],"max_tokens":O,"min_tokens":O,"ignore_eos":true,
//	 "stream":true,"stream_options":{"include_usage":true}}
//
// (with t's options in place of min_tokens and ignore_eos, see
// appendLengthTail).
func appendCompletionBody(b []byte, model string, tokens []int32, output int, t *bodyTail) []byte {
	b = append(b, `{"model":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"prompt":[`...)
	b = appendTokenList(b, tokens)
	b = append(b, `],"max_tokens":`...)
	return appendLengthTail(b, output, t)
}

// appendTokenList appends the ids comma-separated, as strconv.AppendInt
// would write each: the digits go straight into b's spare capacity (grown
// once), with no call per id. At 256 ids per prompt this was a tenth of the
// client's CPU per request.
func appendTokenList(b []byte, tokens []int32) []byte {
	b = slices.Grow(b, 12*len(tokens))
	for i, t := range tokens {
		if i > 0 {
			b = append(b, ',')
		}
		if t < 0 {
			b = append(b, '-')
		}
		v := uint32(t)
		if t < 0 {
			v = uint32(-int64(t))
		}
		n := 1
		for x := v; x >= 10; x /= 10 {
			n++
		}
		end := len(b) + n
		b = b[:end]
		for k := end - 1; k > end-n; k-- {
			b[k] = byte('0' + v%10)
			v /= 10
		}
		b[end-n] = byte('0' + v)
	}
	return b
}
