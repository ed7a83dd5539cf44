package llamacpp

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// The GGUF v3 container, as ggml/include/gguf.h at llama.cpp 80fb11a
// describes it: magic "GGUF", version, tensor count, key/value count, the
// key/values, the tensor infos, padding to the alignment, then the tensor
// data, each tensor at an aligned offset.
const (
	ggufVersion   = 3
	ggufAlignment = 32 // GGUF_DEFAULT_ALIGNMENT
)

// GGUF value types (gguf.h, enum gguf_type).
const (
	ggufUint32  = 4
	ggufInt32   = 5
	ggufFloat32 = 6
	ggufString  = 8
	ggufArray   = 9
)

// Tensor element types (ggml.h, enum ggml_type).
const (
	ggmlF32 = 0
	ggmlF16 = 1
)

// kv is one metadata key/value; v is a uint32, float32, string, or a
// []string, []float32 or []int32 array.
type kv struct {
	key string
	v   any
}

// tensor is one tensor: its name, dims (ne0 first, the contiguous one),
// element type, and a function that writes its elements in order.
type tensor struct {
	name string
	dims []uint64
	typ  uint32
	fill func(emit func(float32))
}

func (t *tensor) elems() uint64 {
	n := uint64(1)
	for _, d := range t.dims {
		n *= d
	}
	return n
}

func (t *tensor) bytes() uint64 {
	if t.typ == ggmlF16 {
		return 2 * t.elems()
	}
	return 4 * t.elems()
}

// ggufWriter writes little-endian GGUF fields, remembering the first error.
type ggufWriter struct {
	w   *bufio.Writer
	n   uint64
	err error
	buf [8]byte
}

func (g *ggufWriter) raw(b []byte) {
	if g.err != nil {
		return
	}
	_, g.err = g.w.Write(b)
	g.n += uint64(len(b))
}
func (g *ggufWriter) u32(v uint32)  { binary.LittleEndian.PutUint32(g.buf[:4], v); g.raw(g.buf[:4]) }
func (g *ggufWriter) u64(v uint64)  { binary.LittleEndian.PutUint64(g.buf[:8], v); g.raw(g.buf[:8]) }
func (g *ggufWriter) f32(v float32) { g.u32(math.Float32bits(v)) }
func (g *ggufWriter) u16(v uint16)  { binary.LittleEndian.PutUint16(g.buf[:2], v); g.raw(g.buf[:2]) }
func (g *ggufWriter) str(s string)  { g.u64(uint64(len(s))); g.raw([]byte(s)) }
func (g *ggufWriter) pad() {
	for g.n%ggufAlignment != 0 && g.err == nil {
		g.raw([]byte{0})
	}
}

// value writes v's GGUF type, then v.
func (g *ggufWriter) value(v any) {
	switch v := v.(type) {
	case uint32:
		g.u32(ggufUint32)
		g.u32(v)
	case float32:
		g.u32(ggufFloat32)
		g.f32(v)
	case string:
		g.u32(ggufString)
		g.str(v)
	case []string:
		g.array(ggufString, len(v))
		for _, s := range v {
			g.str(s)
		}
	case []float32:
		g.array(ggufFloat32, len(v))
		for _, f := range v {
			g.f32(f)
		}
	case []int32:
		g.array(ggufInt32, len(v))
		for _, x := range v {
			g.u32(uint32(x))
		}
	default:
		panic(fmt.Sprintf("gguf: no value type for %T", v))
	}
}

// array writes an array's header: its element type and length.
func (g *ggufWriter) array(typ uint32, n int) {
	g.u32(ggufArray)
	g.u32(typ)
	g.u64(uint64(n))
}

// writeGGUF writes a whole GGUF v3 file.
func writeGGUF(w io.Writer, kvs []kv, tensors []tensor) error {
	g := &ggufWriter{w: bufio.NewWriterSize(w, 1<<20)}
	g.raw([]byte("GGUF"))
	g.u32(ggufVersion)
	g.u64(uint64(len(tensors)))
	g.u64(uint64(len(kvs)))
	for _, e := range kvs {
		g.str(e.key)
		g.value(e.v)
	}
	var off uint64
	for i := range tensors {
		t := &tensors[i]
		g.str(t.name)
		g.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			g.u64(d)
		}
		g.u32(t.typ)
		g.u64(off)
		off += t.bytes()
		off = (off + ggufAlignment - 1) / ggufAlignment * ggufAlignment
	}
	g.pad()
	for i := range tensors {
		t := &tensors[i]
		var n uint64
		t.fill(func(v float32) {
			n++
			if t.typ == ggmlF16 {
				g.u16(float16(v))
			} else {
				g.f32(v)
			}
		})
		if n != t.elems() && g.err == nil {
			return fmt.Errorf("gguf: tensor %s: wrote %d elements, its dims hold %d", t.name, n, t.elems())
		}
		g.pad()
	}
	if g.err != nil {
		return fmt.Errorf("gguf: %w", g.err)
	}
	if err := g.w.Flush(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

// float16 rounds f to IEEE 754 binary16 (round to nearest even); the
// weights written here are small and finite, but overflow gives ±Inf and
// tiny values flush through subnormals correctly.
func float16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff == 0:
		return sign
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		h := mant >> shift
		rem := mant & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is the right rounding
	}
	return sign | uint16(h)
}
