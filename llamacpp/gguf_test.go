package llamacpp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"testing"
)

// ggufReader reads back what writeGGUF wrote, independently of it, as
// gguf.h lays the file out.
type ggufReader struct {
	r   *bytes.Reader
	err error
}

func (g *ggufReader) u32() uint32 {
	var v uint32
	if g.err == nil {
		g.err = binary.Read(g.r, binary.LittleEndian, &v)
	}
	return v
}

func (g *ggufReader) u64() uint64 {
	var v uint64
	if g.err == nil {
		g.err = binary.Read(g.r, binary.LittleEndian, &v)
	}
	return v
}

func (g *ggufReader) str() string {
	n := g.u64()
	if g.err != nil || n > 1<<20 {
		g.err = fmt.Errorf("string of %d bytes", n)
		return ""
	}
	b := make([]byte, n)
	_, g.err = io.ReadFull(g.r, b)
	return string(b)
}

// value reads a value of type typ: scalars as numbers or strings, arrays
// as their length and first element.
func (g *ggufReader) value(typ uint32) any {
	switch typ {
	case ggufUint32, ggufInt32:
		return g.u32()
	case ggufFloat32:
		return math.Float32frombits(g.u32())
	case ggufString:
		return g.str()
	case ggufArray:
		et, n := g.u32(), g.u64()
		var first any
		for i := uint64(0); i < n && g.err == nil; i++ {
			v := g.value(et)
			if i == 0 {
				first = v
			}
		}
		return [2]any{n, first}
	}
	g.err = fmt.Errorf("value type %d", typ)
	return nil
}

type tensorInfo struct {
	dims      []uint64
	typ       uint32
	offset    uint64
	firstElem float32
}

func readGGUF(t *testing.T, b []byte) (map[string]any, map[string]tensorInfo) {
	t.Helper()
	g := &ggufReader{r: bytes.NewReader(b)}
	magic := make([]byte, 4)
	_, _ = io.ReadFull(g.r, magic)
	if string(magic) != "GGUF" || g.u32() != 3 {
		t.Fatalf("not a GGUF v3 file: %q", magic)
	}
	nt, nkv := g.u64(), g.u64()
	kvs := map[string]any{}
	for range nkv {
		k := g.str()
		kvs[k] = g.value(g.u32())
	}
	tensors := map[string]tensorInfo{}
	var order []string
	for range nt {
		name := g.str()
		ti := tensorInfo{dims: make([]uint64, g.u32())}
		for i := range ti.dims {
			ti.dims[i] = g.u64()
		}
		ti.typ, ti.offset = g.u32(), g.u64()
		tensors[name] = ti
		order = append(order, name)
	}
	if g.err != nil {
		t.Fatal(g.err)
	}
	pos := int64(len(b)) - int64(g.r.Len())
	data := (pos + ggufAlignment - 1) / ggufAlignment * ggufAlignment
	var end uint64
	for _, name := range order {
		ti := tensors[name]
		if ti.offset%ggufAlignment != 0 {
			t.Errorf("%s at offset %d, not aligned to %d", name, ti.offset, ggufAlignment)
		}
		at := uint64(data) + ti.offset
		if ti.typ == ggmlF32 {
			ti.firstElem = math.Float32frombits(binary.LittleEndian.Uint32(b[at:]))
		}
		tensors[name] = ti
		n := uint64(1)
		for _, d := range ti.dims {
			n *= d
		}
		size := 4 * n
		if ti.typ == ggmlF16 {
			size = 2 * n
		}
		end = max(end, at+size)
	}
	if pad := (end + ggufAlignment - 1) / ggufAlignment * ggufAlignment; uint64(len(b)) != pad {
		t.Errorf("file is %d bytes, its tensors end at %d (padded %d)", len(b), end, pad)
	}
	return kvs, tensors
}

// TestTinyModelLayout reads the tiny model back: the keys llama.cpp's
// loader requires, a Llama-2 vocabulary, llama's tensors with their shapes,
// the steering in place, and as many weights as Params says.
func TestTinyModelLayout(t *testing.T) {
	for _, f16 := range []bool{false, true} {
		m := TinyModel
		m.Vocab, m.F16 = 1000, f16
		var buf bytes.Buffer
		if err := m.Write(&buf); err != nil {
			t.Fatal(err)
		}
		kvs, tensors := readGGUF(t, buf.Bytes())
		for k, want := range map[string]any{
			"general.architecture": "llama", "llama.block_count": uint32(2), "llama.embedding_length": uint32(128),
			"llama.attention.head_count": uint32(4), "llama.rope.dimension_count": uint32(32), "llama.feed_forward_length": uint32(512),
			"llama.context_length": uint32(8192), "tokenizer.ggml.model": "llama", "tokenizer.ggml.bos_token_id": uint32(1),
			"tokenizer.ggml.eos_token_id": uint32(2), "llama.attention.layer_norm_rms_epsilon": float32(1e-5),
			"tokenizer.ggml.tokens": [2]any{uint64(1000), "<unk>"}, "tokenizer.ggml.token_type": [2]any{uint64(1000), uint32(2)},
			"tokenizer.ggml.scores": [2]any{uint64(1000), float32(0)},
		} {
			if got := kvs[k]; got != want {
				t.Errorf("%s = %#v, want %#v", k, got, want)
			}
		}
		var params uint64
		for name, ti := range tensors {
			n := uint64(1)
			for _, d := range ti.dims {
				n *= d
			}
			params += n
			if len(ti.dims) == 1 && ti.typ != ggmlF32 {
				t.Errorf("%s: norm weights must stay F32", name)
			}
		}
		if int64(params) != m.Params() || len(tensors) != 3+9*2 {
			t.Errorf("%d tensors, %d weights; Params says %d", len(tensors), params, m.Params())
		}
		if d := tensors["blk.1.ffn_down.weight"].dims; d[0] != 512 || d[1] != 128 {
			t.Errorf("ffn_down dims %v", d)
		}
		if !f16 {
			if e := tensors["token_embd.weight"].firstElem; e != 1 {
				t.Errorf("token 0's embedding starts %v, want the steering +1", e)
			}
			if e := tensors["output.weight"].firstElem; e != -steer {
				t.Errorf("<unk>'s output row starts %v, want -%d", e, steer)
			}
		}
	}
}

func TestTokenText(t *testing.T) {
	seen := map[string]bool{}
	for id := FirstOrdinary; id < 32000; id++ {
		s := TokenText(id)
		if seen[s] || len(s) < 4 {
			t.Fatalf("token %d: %q repeats or is empty", id, s)
		}
		seen[s] = true
	}
	if TokenText(FirstOrdinary) != "▁a" || TokenText(FirstOrdinary+26) != "▁aa" {
		t.Errorf("%q %q", TokenText(FirstOrdinary), TokenText(FirstOrdinary+26))
	}
}

func TestFloat16(t *testing.T) {
	for _, tc := range []struct {
		f    float32
		want uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800}, {65504, 0x7bff}, {1e6, 0x7c00},
		{float32(math.Ldexp(1, -24)), 0x0001}, {float32(math.Ldexp(1, -14)), 0x0400}, {1e-9, 0},
		{1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02}, {0.02, 0x251f}, {-16, 0xcc00},
	} {
		if got := float16(tc.f); got != tc.want {
			t.Errorf("float16(%v) = %#04x, want %#04x", tc.f, got, tc.want)
		}
	}
}

func TestModelValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Model)
		want string
	}{
		{func(m *Model) { m.Vocab = 259 }, "vocab"},
		{func(m *Model) { m.Heads = 3 }, "heads"},
		{func(m *Model) { m.Heads = 128 }, "heads"}, // head size 1: RoPE rotates pairs
		{func(m *Model) { m.KVHeads = 3 }, "kv_heads"},
		{func(m *Model) { m.Layers = 0 }, "layers"},
		{func(m *Model) { m.Context = 8 }, "context"},
	} {
		m := TinyModel
		tc.edit(&m)
		if err := m.Validate(); err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%+v: %v, want %q", m, err, tc.want)
		}
	}
}
