package matrices

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// syntheticAgentic1000 generates testdata/traces/synthetic_agentic_1000.jsonl:
// a SYNTHETIC 1,000-request agentic trace shaped like seed 003's sample
// (Mooncake format, 512-token hash-id blocks): sessions of growing turns
// behind a shared 8-block system prompt, first turns of median ~10k tokens
// with a long tail, each later turn adding a tool result of median ~2.5k
// tokens, outputs of median ~80 tokens with a long tail, over a 2-hour
// window. `mbench trace stats` on it: input mean 33.4k, p50 23k, p90 76k
// tokens (seed 003's: 33.6k, 20k, 88k), output mean 400, p50 84 (445,
// 80), ideal hit rate 77.9% (71%). It is a stand-in that lets agentic8.yaml validate and run
// anywhere; the real sample is made with `mbench trace sample`.
func syntheticAgentic1000() []byte {
	r := rand.New(rand.NewPCG(20260522, 3))
	logn := func(median, sigma float64) float64 { return median * math.Exp(sigma*r.NormFloat64()) }
	type line struct {
		ts            float64
		in, out, turn int
		ids           []int64
		session       string
	}
	var lines []line
	next := int64(100)
	const system = 8 // shared system-prompt blocks 0..7
	for s := 0; len(lines) < 1000; s++ {
		ts := r.Float64() * 7.2e6 * 0.9
		chain := make([]int64, 0, 512)
		for b := range system {
			chain = append(chain, int64(b))
		}
		tokens := system*512 + int(min(logn(6000, 1.3), 150000))
		turns := 1 + int(r.ExpFloat64()*4)
		for turn := 1; turn <= turns && len(lines) < 1000; turn++ {
			if turn > 1 {
				tokens += int(min(logn(2500, 1.2), 40000))
			}
			if tokens > 190000 {
				break // the session outgrew a 200k-token context
			}
			for len(chain) < (tokens+511)/512 {
				chain = append(chain, next)
				next++
			}
			out := int(min(max(logn(80, 1.9), 1), 8192))
			lines = append(lines, line{ts: math.Round(ts), in: tokens, out: out, turn: turn, ids: slices.Clone(chain), session: fmt.Sprintf("sess-%03d", s)})
			ts += 2000 + logn(20000, 0.8)
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int { return int(a.ts - b.ts) })
	var b bytes.Buffer
	for _, l := range lines {
		fmt.Fprintf(&b, `{"timestamp": %.0f, "input_length": %d, "output_length": %d, "hash_ids": [`, l.ts, l.in, l.out)
		for i, id := range l.ids {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprint(&b, id)
		}
		fmt.Fprintf(&b, `], "session_id": %q, "turn": %d}`+"\n", l.session, l.turn)
	}
	return b.Bytes()
}

// TestSyntheticAgentic1000: the committed synthetic trace is the
// generator's output (go test ./matrices -run Synthetic -update rewrites it).
func TestSyntheticAgentic1000(t *testing.T) {
	const path = "testdata/traces/synthetic_agentic_1000.jsonl"
	want := syntheticAgentic1000()
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s differs from its generator (%v): go test ./matrices -run Synthetic -update", path, err)
	}
}
