package probes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// genBlock returns n realistic engine_step.jsonl lines (all timers, as the
// vLLM plugin writes them), ~300 bytes each.
func genBlock(n int) []byte {
	rng := rand.New(rand.NewPCG(7, 8))
	var b []byte
	ts := int64(1_780_000_000_000_000)
	for i := 0; i < n; i++ {
		step := int64(math.Exp(3.5 + 2.5*rng.Float64()))
		sched, meta := step/10+1, rng.Int64N(40)
		exec := step / 2
		upd, gf := rng.Int64N(30)+1, rng.Int64N(20)
		un := max(0, step-sched-meta-exec-upd-gf)
		ts += step + rng.Int64N(50)
		b = fmt.Appendf(b, `{"ts_us":%d,"step_duration_us":%d,"schedule_us":%d,"build_meta_us":%d,"execute_us":%d,"update_us":%d,"get_finished_us":%d,"unaccounted_us":%d,"num_running":%d,"num_waiting":%d,"num_prefill_tokens":%d,"num_decode_tokens":%d,"pid":31337}`+"\n",
			ts, step, sched, meta, exec, upd, gf, un, rng.IntN(256), rng.IntN(32), rng.IntN(8192), rng.IntN(256))
	}
	return b
}

// repeatReader yields a block of lines over and over, for `lines` lines.
type repeatReader struct {
	block      []byte
	off        int
	left       int64 // bytes left
	blockLines int
}

func newRepeatReader(block []byte, blockLines int, lines int64) *repeatReader {
	return &repeatReader{block: block, left: lines / int64(blockLines) * int64(len(block)), blockLines: blockLines}
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && r.left > 0 {
		k := copy(p[n:min(len(p), n+int(min(r.left, int64(len(p)))))], r.block[r.off:])
		n += k
		r.off = (r.off + k) % len(r.block)
		r.left -= int64(k)
	}
	return n, nil
}

// BenchmarkSummarizeSteps ingests a generated 10-million-line step log per
// iteration and reports lines/s (target: ≥ 2e6 per core). Run with
// -benchtime=1x -cpu=1.
func BenchmarkSummarizeSteps(b *testing.B) {
	const lines = 10_000_000
	block := genBlock(10_000)
	b.SetBytes(int64(len(block)) * lines / 10_000)
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		st, err := SummarizeSteps(context.Background(), newRepeatReader(block, 10_000, lines), 0, 0, nil)
		if err != nil || st.NSteps != lines {
			b.Fatal(st.NSteps, err)
		}
	}
	cpu := processCPU() - cpu0
	b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
	// On a shared machine wall time includes waiting for a core; lines per
	// CPU-second of this process is the per-core figure.
	b.ReportMetric(float64(lines)*float64(b.N)/cpu.Seconds(), "lines/cpu-s")
}

// BenchmarkSummarizeStepsMemory compares allocation for 1M and 10M lines in
// one run: B/op must not grow with the length.
func BenchmarkSummarizeStepsMemory(b *testing.B) {
	block := genBlock(10_000)
	for _, lines := range []int64{1_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("lines=%d", lines), func(b *testing.B) {
			b.ReportAllocs()
			var peak uint64
			for b.Loop() {
				if _, err := SummarizeSteps(context.Background(), newRepeatReader(block, 10_000, lines), 0, 0, nil); err != nil {
					b.Fatal(err)
				}
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
			b.ReportMetric(float64(peak)/(1<<20), "heap-inuse-MiB")
		})
	}
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	d, _ := ProcessCPU()
	return d
}

// TestSummarizeStepsMemoryBounded: 10× the lines must not allocate more.
func TestSummarizeStepsMemoryBounded(t *testing.T) {
	block := genBlock(1000)
	alloc := func(lines int64) uint64 {
		var a, z runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		if _, err := SummarizeSteps(context.Background(), newRepeatReader(block, 1000, lines), 0, 0, nil); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&z)
		return z.TotalAlloc - a.TotalAlloc
	}
	small, big := alloc(20_000), alloc(200_000)
	t.Logf("allocated: %d B for 20k lines, %d B for 200k lines (ratio %.2f)", small, big, float64(big)/float64(small))
	if float64(big) > 1.2*float64(small)+64<<10 {
		t.Fatalf("allocation grows with length: %d → %d bytes", small, big)
	}
}

// BenchmarkParseStepLine parses one realistic line (the per-line cost).
func BenchmarkParseStepLine(b *testing.B) {
	block := genBlock(100)
	lines := bytes.Split(bytes.TrimSpace(block), []byte("\n"))
	sp := stepParser{skip: ^uint32(0) &^ (1<<NumTimers - 1)} // as SummarizeSteps
	var rec StepRecord
	i := 0
	for b.Loop() {
		if err := sp.parse(lines[i%len(lines)], &rec); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkSummarizeStepsSmall ingests 100k lines per op (for instruction
// counts under valgrind, where 10M lines take too long).
func BenchmarkSummarizeStepsSmall(b *testing.B) {
	block := genBlock(10_000)
	for b.Loop() {
		if _, err := SummarizeSteps(context.Background(), newRepeatReader(block, 10_000, 100_000), 0, 0, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/100_000, "ns/line")
}
