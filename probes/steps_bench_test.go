package probes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
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

// pyFloat formats ns as µs the way the vLLM plugin writes it (Python's
// repr of ns / 1e3: shortest round-trip digits, "3104.0" for whole µs).
func pyFloat(b []byte, ns int64) []byte {
	n := len(b)
	b = strconv.AppendFloat(b, float64(ns)/1e3, 'f', -1, 64)
	if bytes.IndexByte(b[n:], '.') < 0 {
		b = append(b, ".0"...)
	}
	return b
}

// genBlockFrac returns n engine_step.jsonl lines with fractional µs timers
// (ns resolution), exactly as the plugin's _fmt_step writes them: the
// shape of real logs.
func genBlockFrac(n int) []byte {
	rng := rand.New(rand.NewPCG(7, 9))
	var b []byte
	ts := int64(1_780_000_000_000_000)
	for i := 0; i < n; i++ {
		step := int64(math.Exp(10.3 + 7*rng.Float64())) // ns: 30 µs … 33 ms
		sched, meta := step/10+rng.Int64N(999), rng.Int64N(40_000)
		exec := step / 2
		upd, gf := rng.Int64N(30_000)+1, rng.Int64N(20_000)
		un := max(0, step-sched-exec-upd)
		ts += step/1000 + rng.Int64N(50)
		b = fmt.Appendf(b, `{"ts_us":%d,"step_duration_us":`, ts)
		b = pyFloat(b, step)
		for _, f := range []struct {
			k string
			v int64
		}{{"schedule_us", sched}, {"build_meta_us", meta}, {"execute_us", exec}, {"update_us", upd}, {"get_finished_us", gf}, {"unaccounted_us", un}} {
			b = append(append(append(b, ',', '"'), f.k...), '"', ':')
			b = pyFloat(b, f.v)
		}
		b = fmt.Appendf(b, `,"num_running":%d,"num_waiting":%d,"num_prefill_tokens":%d,"num_decode_tokens":%d,"pid":31337}`+"\n",
			rng.IntN(256), rng.IntN(32), rng.IntN(8192), rng.IntN(256))
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
// iteration and reports lines per CPU-second (target: ≥ 2e6 per core).
// Sub-benchmark frac has fractional µs values, as the plugin writes them
// (the real shape); int has whole µs. Each also reports "x-baseline": its
// time over that of splitting the same bytes into lines (bufio +
// bytes.IndexByte), measured in the same run, so the figure compares across
// machines. Run with -benchtime=1x -cpu=1.
func BenchmarkSummarizeSteps(b *testing.B) {
	const lines = 10_000_000
	for _, c := range []struct {
		name  string
		block []byte
		n     int
	}{{"frac", genBlockFrac(fracBlockLines), fracBlockLines}, {"int", genBlock(10_000), 10_000}} {
		b.Run(c.name, func(b *testing.B) {
			block := c.block
			b.SetBytes(int64(len(block)) * lines / int64(c.n))
			b.ReportAllocs()
			base := baselineCPU(block, c.n, lines)
			cpu0 := processCPU()
			for b.Loop() {
				st, err := SummarizeSteps(context.Background(), newRepeatReader(block, c.n, lines), 0, 0, nil)
				if err != nil || st.NSteps != lines {
					b.Fatal(st.NSteps, err)
				}
			}
			cpu := processCPU() - cpu0
			b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
			// On a shared machine wall time includes waiting for a core; lines per
			// CPU-second of this process is the per-core figure.
			b.ReportMetric(float64(lines)*float64(b.N)/cpu.Seconds(), "lines/cpu-s")
			b.ReportMetric(cpu.Seconds()/float64(b.N)/base.Seconds(), "x-baseline")
		})
	}
}

// fracBlockLines is the length of the repeated block of fractional lines:
// enough for more than tailCap distinct values per timer, as in a real log
// of ns-resolution timers, where values rarely repeat.
const fracBlockLines = 400_000

// baselineCPU is the CPU time of only splitting the log into lines.
func baselineCPU(block []byte, blockLines int, lines int64) time.Duration {
	best := time.Duration(math.MaxInt64)
	for range 3 {
		cpu0 := processCPU()
		lr := newLineReader(newRepeatReader(block, blockLines, lines))
		n := int64(0)
		for {
			if _, _, err := lr.next(); err != nil {
				break
			}
			n++
		}
		if n != lines {
			panic(fmt.Sprint("baseline read ", n, " lines"))
		}
		best = min(best, processCPU()-cpu0)
	}
	return best
}

// BenchmarkSummarizeStepsMemory compares allocation for 1M and 8M fresh
// batch-queue lines (freshLogReader) in one run: B/op and the heap in use
// must not grow with the length.
func BenchmarkSummarizeStepsMemory(b *testing.B) {
	for _, lines := range []int64{1_000_000, 8_000_000} {
		b.Run(fmt.Sprintf("lines=%d", lines), func(b *testing.B) {
			b.ReportAllocs()
			var peak uint64
			for b.Loop() {
				if _, err := SummarizeSteps(context.Background(), newFreshLogReader(5, lines, pathBatchQueue), 0, 0, nil); err != nil {
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
	block := genBlockFrac(1000)
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
	block := genBlockFrac(100)
	lines := bytes.Split(bytes.TrimSpace(block), []byte("\n"))
	sp := stepParser{skip: stepSkip} // as SummarizeSteps
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
	block := genBlockFrac(10_000)
	for b.Loop() {
		if _, err := SummarizeSteps(context.Background(), newRepeatReader(block, 10_000, 100_000), 0, 0, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/100_000, "ns/line")
}

// BenchmarkSummarizeStepsFresh ingests a generated log whose every record
// is fresh (freshLogReader: new ns-resolution values on every record,
// every timer of the path, gpu_us, batch and token counts) and reports
// records per CPU-second of SummarizeSteps (target: ≥ 2e6). Cases: bq
// (batch-queue lines, as async scheduling writes them; wait_us on half of
// them), step, mixed (alternating) as JSONL lines, and bin-bq, bin-step,
// bin-mixed as the plugin's binary step records (what it writes now). The
// log is generated by another goroutine on its own OS thread; the CPU time
// is that of the consuming thread (CLOCK_THREAD_CPUTIME_ID), so the
// generator is not counted. Reported beside it, so that a figure can be
// judged on the machine it came from:
//
//   - lines/wall-s: the same over the consumer's wall time (a thread CPU
//     clock that ran while the host had descheduled the virtual CPU would
//     make the two agree while both are slow);
//   - x-baseline: SummarizeSteps' thread CPU over that of only splitting
//     the same JSONL stream into lines, in the same run (machine-neutral);
//   - calib-ns: the thread CPU per step of a fixed chain of dependent
//     integer multiply-adds (calibrationNs), about 1 ns on a current core:
//     how fast this machine's thread CPU time is;
//   - steal-%: the host's steal time over the case (/proc/stat);
//   - B/op and allocs/op (memory is independent of length: see
//     BenchmarkSummarizeStepsMemory).
//
// Run with -benchtime=1x.
func BenchmarkSummarizeStepsFresh(b *testing.B) {
	const lines = 4_000_000
	calib := calibrationNs(b)
	for _, c := range []struct {
		name string
		path int
		bin  bool
	}{{"bq", pathBatchQueue, false}, {"step", pathStep, false}, {"mixed", -1, false},
		{"bin-bq", pathBatchQueue, true}, {"bin-step", pathStep, true}, {"bin-mixed", -1, true}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			split := min(consumerCPU(b, c.path, lines, splitLines), consumerCPU(b, c.path, lines, splitLines))
			var sum, wsum time.Duration
			s0, t0 := stealTicks()
			for b.Loop() {
				cpu, wall := consumerCPUWall(b, c.path, lines, c.bin, func(r io.Reader) {
					st, err := SummarizeSteps(context.Background(), r, 0, 0, nil)
					if err != nil || st.NSteps != lines || st.Timers["gpu_us"].N != lines || st.Malformed != 0 {
						b.Fatal(st.NSteps, st.Malformed, err)
					}
				})
				sum, wsum = sum+cpu, wsum+wall
			}
			s1, t1 := stealTicks()
			cpu, wall := sum/time.Duration(b.N), wsum/time.Duration(b.N)
			b.ReportMetric(float64(lines)/cpu.Seconds(), "lines/cpu-s")
			b.ReportMetric(float64(lines)/wall.Seconds(), "lines/wall-s")
			b.ReportMetric(cpu.Seconds()/split.Seconds(), "x-baseline")
			b.ReportMetric(calib, "calib-ns")
			if t1 > t0 {
				b.ReportMetric(100*float64(s1-s0)/float64(t1-t0), "steal-%")
			}
		})
	}
}

// splitLines only splits a stream into lines (the baseline).
func splitLines(r io.Reader) {
	lr := newLineReader(r)
	for {
		if _, _, err := lr.next(); err != nil {
			return
		}
	}
}
