package llamacpp

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// Model describes a random-weight llama ("general.architecture" llama) to
// serve with llama-server when what is measured is the serving path, not
// the answers: its vocabulary is laid out like Llama-2's (<unk>, <s>, </s>,
// the 256 byte tokens <0x00>…<0xFF>, then ordinary tokens up to Vocab), and
// its weights are steered toward ordinary tokens, so it streams one token
// (one word) per chunk and never samples an end-of-generation or a byte
// token: a completion runs to max_tokens whether or not the request asks
// to ignore EOS.
type Model struct {
	Vocab   int    // tokens, ≥ FirstOrdinary+1; Llama-2 has 32,000
	Layers  int    // transformer blocks
	Width   int    // embedding length (n_embd)
	Heads   int    // attention heads; Width/Heads is the head size (even: RoPE)
	KVHeads int    // key/value heads (grouped-query attention); 0 = Heads
	FF      int    // feed-forward length; 0 = 4 × Width
	Context int    // trained context length (llama.context_length)
	F16     bool   // weights as F16 (half the file) instead of F32
	Seed    uint64 // the weights are a pure function of the seed
	Name    string // general.name; "" = "mbench-tiny-llama"
	// Ends steers the output layer toward the end-of-sequence token </s>
	// instead of away from it: every completion that may end at
	// end-of-sequence is the engine's one-token answer (</s>, streamed as
	// empty text), while a request that ignores EOS (llama-server then
	// biases every end-of-generation token to −∞) runs to max_tokens as
	// with the default model.
	Ends bool
}

// TinyModel is the model the CI tests serve: 2 blocks of width 128 with a
// Llama-2 vocabulary (8.5 M parameters, 35 MB as F32; it loads in about a
// quarter of a second on one core).
var TinyModel = Model{Vocab: 32000, Layers: 2, Width: 128, Heads: 4, Context: 8192, Seed: 1}

// Token ids of the Llama-2 layout.
const (
	UnkID         = 0
	BOSID         = 1
	EOSID         = 2
	FirstByteID   = 3   // <0x00>
	FirstOrdinary = 259 // the first ordinary token, after the 256 byte tokens
)

// steer is how far the output layer pushes the special and byte tokens'
// logits below the ordinary ones' (see Write).
const steer = 16

// Validate reports the first field that cannot make a loadable model.
func (m Model) Validate() error {
	switch {
	case m.Vocab <= FirstOrdinary:
		return fmt.Errorf("vocab: must be > %d (unk, bos, eos and 256 byte tokens come first), got %d", FirstOrdinary, m.Vocab)
	case m.Vocab > 1<<24:
		return fmt.Errorf("vocab: must be ≤ %d, got %d", 1<<24, m.Vocab)
	case m.Layers < 1 || m.Layers > 256:
		return fmt.Errorf("layers: must be in [1, 256], got %d", m.Layers)
	case m.Width < 2 || m.Width > 1<<15:
		return fmt.Errorf("width: must be in [2, %d], got %d", 1<<15, m.Width)
	case m.Heads < 1 || m.Width%m.Heads != 0 || (m.Width/m.Heads)%2 != 0:
		return fmt.Errorf("heads: must divide width %d into heads of even size, got %d", m.Width, m.Heads)
	case m.KVHeads < 0 || (m.KVHeads > 0 && m.Heads%m.KVHeads != 0):
		return fmt.Errorf("kv_heads: must divide heads %d (or be 0 for %d), got %d", m.Heads, m.Heads, m.KVHeads)
	case m.FF < 0 || m.FF > 1<<18:
		return fmt.Errorf("ff: must be in [1, %d] (or 0 for 4 × width), got %d", 1<<18, m.FF)
	case m.Context < 16 || m.Context > 1<<24:
		return fmt.Errorf("context: must be in [16, %d], got %d", 1<<24, m.Context)
	}
	return nil
}

func (m Model) kvHeads() int { return cmp.Or(m.KVHeads, m.Heads) }

func (m Model) ff() int { return cmp.Or(m.FF, 4*m.Width) }

// Params is the number of weights.
func (m Model) Params() int64 {
	w, v, f := int64(m.Width), int64(m.Vocab), int64(m.ff())
	kv := w / int64(m.Heads) * int64(m.kvHeads())
	block := 2*w + w*w + 2*w*kv + w*w + 3*w*f
	return 2*v*w + w + int64(m.Layers)*block
}

// TokenText is the text of ordinary token id (id ≥ FirstOrdinary) as the
// vocabulary stores it: "▁" (SentencePiece's space) and a lower-case word
// unique to the id, so a streamed token reads " word".
func TokenText(id int) string {
	k := id - FirstOrdinary
	var b strings.Builder
	b.WriteString("▁")
	for {
		b.WriteByte(byte('a' + k%26))
		k /= 26
		if k == 0 {
			break
		}
		k--
	}
	return b.String()
}

func (m Model) metadata() []kv {
	tokens := make([]string, m.Vocab)
	scores := make([]float32, m.Vocab)
	types := make([]int32, m.Vocab)
	tokens[UnkID], types[UnkID] = "<unk>", 2 // LLAMA_TOKEN_TYPE_UNKNOWN
	tokens[BOSID], types[BOSID] = "<s>", 3   // CONTROL
	tokens[EOSID], types[EOSID] = "</s>", 3
	for b := range 256 {
		tokens[FirstByteID+b], types[FirstByteID+b] = fmt.Sprintf("<0x%02X>", b), 6 // BYTE
	}
	for id := FirstOrdinary; id < m.Vocab; id++ {
		tokens[id], types[id] = TokenText(id), 1 // NORMAL
		scores[id] = -float32(id - FirstOrdinary)
	}
	name := cmp.Or(m.Name, "mbench-tiny-llama")
	head := m.Width / m.Heads
	return []kv{
		{"general.architecture", "llama"},
		{"general.name", name},
		{"general.alignment", uint32(ggufAlignment)},
		{"llama.context_length", uint32(m.Context)},
		{"llama.embedding_length", uint32(m.Width)},
		{"llama.block_count", uint32(m.Layers)},
		{"llama.feed_forward_length", uint32(m.ff())},
		{"llama.attention.head_count", uint32(m.Heads)},
		{"llama.attention.head_count_kv", uint32(m.kvHeads())},
		{"llama.rope.dimension_count", uint32(head)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.vocab_size", uint32(m.Vocab)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.scores", scores},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.bos_token_id", uint32(BOSID)},
		{"tokenizer.ggml.eos_token_id", uint32(EOSID)},
		{"tokenizer.ggml.unknown_token_id", uint32(UnkID)},
	}
}

// tensors lists the llama tensors (names and shapes as llama.cpp's
// src/models/llama.cpp load_arch_tensors creates them, at 80fb11a).
//
// The steering: every token embedding has +1 in dimension 0 beside N(0,
// 0.02) noise elsewhere, and the blocks' output projections are scaled by
// 1/√(2·layers), so dimension 0 of the residual stream stays positive and
// dominant through the blocks and after output_norm. The output layer's row
// of every special and byte token has −steer in dimension 0 (ordinary
// tokens: 0), which puts their logits ≈ steer·√Width/√(1+…) below every
// ordinary token's whatever the context: greedy or sampled, top-k or not,
// the next token is always an ordinary one.
func (m Model) tensors() []tensor {
	w, v, f := uint64(m.Width), uint64(m.Vocab), uint64(m.ff())
	kvw := w / uint64(m.Heads) * uint64(m.kvHeads())
	typ := uint32(ggmlF32)
	if m.F16 {
		typ = ggmlF16
	}
	rng := rand.New(rand.NewPCG(m.Seed, 0x6d62656e6368)) // "mbench"
	matrix := func(name string, ne0, ne1 uint64, std float64) tensor {
		return tensor{name: name, dims: []uint64{ne0, ne1}, typ: typ, fill: func(emit func(float32)) {
			for range ne0 * ne1 {
				emit(float32(rng.NormFloat64() * std))
			}
		}}
	}
	ones := func(name string, n uint64) tensor {
		return tensor{name: name, dims: []uint64{n}, typ: ggmlF32, fill: func(emit func(float32)) {
			for range n {
				emit(1)
			}
		}}
	}
	const std = 0.02
	proj := std / math.Sqrt(2*float64(m.Layers))
	out := []tensor{
		{name: "token_embd.weight", dims: []uint64{w, v}, typ: typ, fill: func(emit func(float32)) {
			for range v {
				emit(1)
				for range w - 1 {
					emit(float32(rng.NormFloat64() * std))
				}
			}
		}},
		ones("output_norm.weight", w),
		{name: "output.weight", dims: []uint64{w, v}, typ: typ, fill: func(emit func(float32)) {
			for id := range v {
				if m.Ends && id == EOSID {
					emit(steer)
				} else if id < FirstOrdinary {
					emit(-steer)
				} else {
					emit(0)
				}
				for range w - 1 {
					emit(float32(rng.NormFloat64() * std))
				}
			}
		}},
	}
	for i := range m.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		out = append(out,
			ones(p+"attn_norm.weight", w),
			matrix(p+"attn_q.weight", w, w, std),
			matrix(p+"attn_k.weight", w, kvw, std),
			matrix(p+"attn_v.weight", w, kvw, std),
			matrix(p+"attn_output.weight", w, w, proj),
			ones(p+"ffn_norm.weight", w),
			matrix(p+"ffn_gate.weight", w, f, std),
			matrix(p+"ffn_up.weight", w, f, std),
			matrix(p+"ffn_down.weight", f, w, proj),
		)
	}
	return out
}

// Write writes the model as a GGUF v3 file to w.
func (m Model) Write(w io.Writer) error {
	if err := m.Validate(); err != nil {
		return err
	}
	return writeGGUF(w, m.metadata(), m.tensors())
}

// WriteFile writes the model to path atomically (a temporary file in the
// same directory, renamed into place), so a crash never leaves a partial
// model a later run would load.
func (m Model) WriteFile(path string) (err error) {
	if err := m.Validate(); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = m.Write(tmp); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
