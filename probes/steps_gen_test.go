package probes

import (
	"encoding/binary"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"strconv"
)

// freshLogReader generates a realistic step log on the fly: every line has
// fresh values (ns-resolution µs, formatted as the vLLM plugin's Python
// repr writes them), the timers of its path, the GPU time, the batch id and
// the token counts, as the plugin writes batch-queue lines (async
// scheduling) or step() lines. Nothing repeats: the log is not a block
// read over and over. It holds one line of state, whatever the length.
type freshLogReader struct {
	rng   *rand.Rand
	lines int64 // left to write
	path  int   // pathBatchQueue, pathStep, or -1: alternate
	n     int64 // lines written
	ts    int64
	buf   []byte
	off   int
	bin   bool // write the plugin's binary step records instead of JSONL lines
}

func newFreshLogReader(seed uint64, lines int64, path int) *freshLogReader {
	return &freshLogReader{rng: rand.New(rand.NewPCG(seed, 99)), lines: lines, path: path, ts: 1_780_000_000_000_000}
}

func (g *freshLogReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if g.off == len(g.buf) {
			if g.lines == 0 {
				if n == 0 {
					return 0, io.EOF
				}
				return n, nil
			}
			if g.bin {
				g.buf = g.appendRecord(g.buf[:0])
			} else {
				g.buf = g.appendLine(g.buf[:0])
			}
			g.off = 0
			g.lines--
		}
		k := copy(p[n:], g.buf[g.off:])
		n += k
		g.off += k
	}
	return n, nil
}

// logUniform holds exp(u) for u uniform in [0, 1) at 4096 points: ns
// scales them, so drawing a value costs no Exp or Log.
var logUniform = func() (t [4096]float64) {
	for i := range t {
		t[i] = math.Exp(float64(i) / float64(len(t)))
	}
	return t
}()

// ns draws a duration in ns, about log-uniform between lo and hi, with
// fresh low-order digits (values practically never repeat).
func (g *freshLogReader) ns(lo, hi float64) int64 {
	r := g.rng.Uint64()
	span := math.Log(hi / lo)
	u := logUniform[r&4095]
	for k := 1.0; k < span; k++ { // whole e-folds of the range
		if r>>(12+uint(k))&1 != 0 {
			u *= math.E
		}
	}
	return int64(lo*u) + int64(r>>40&1023)
}

// appendUs writes ns as µs the way Python's repr(ns / 1e3) does: the
// shortest round-trip digits, "3104.0" for whole µs.
func appendUs(b []byte, ns int64) []byte {
	b = strconv.AppendInt(b, ns/1000, 10)
	f := ns % 1000
	switch {
	case f == 0:
		return append(b, ".0"...)
	case f%100 == 0:
		return append(b, '.', byte('0'+f/100))
	case f%10 == 0:
		return append(b, '.', byte('0'+f/100), byte('0'+f/10%10))
	}
	return append(b, '.', byte('0'+f/100), byte('0'+f/10%10), byte('0'+f%10))
}

// appendRecord writes one binary step record (steps_binary.go) with the
// values appendLine would write.
func (g *freshLogReader) appendRecord(b []byte) []byte {
	bq := g.path == pathBatchQueue || (g.path < 0 && g.n%2 == 0)
	g.n++
	var v [stepRecSlots]int64
	v[slotSched] = g.ns(20e3, 2e6)
	v[slotMeta] = g.ns(1e3, 80e3)
	v[slotUpd] = g.ns(30e3, 3e6)
	v[slotGF] = g.ns(1e3, 50e3)
	v[slotGPU] = g.ns(200e3, 40e6)
	launch := g.ns(100e3, 8e6)
	wait := g.ns(1e3, 30e6) * int64(bits.OnesCount8(uint8(g.rng.Uint32()))&1)
	un := g.ns(5e3, 400e3)
	step := v[slotSched] + v[slotUpd] + un
	v[slotFlags] = hookedSched | hookedExec | hookedUpd | hookedLaunch
	if bq {
		v[slotLaunch], v[slotWait] = launch, wait
		step += launch + wait
		v[slotFlags] |= flagBatchQueue
	} else {
		v[slotExec] = launch + v[slotGPU]
		step += v[slotExec]
	}
	v[slotDur] = step
	g.ts += step/1000 + int64(g.rng.IntN(50))
	v[slotTs] = g.ts
	v[slotBatch] = g.n
	run := 1 + g.rng.IntN(1024)
	v[slotRunning], v[slotWaiting] = int64(run), int64(g.rng.IntN(64))
	v[slotDecode] = int64(run)
	v[slotTotal] = int64(run + g.rng.IntN(4)*g.rng.IntN(2048))
	v[slotPID] = 31337
	b = append(b, recMark, recKindStep, 1, 0)
	b = binary.LittleEndian.AppendUint32(b, stepRecSlots*8)
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

func (g *freshLogReader) appendLine(b []byte) []byte {
	bq := g.path == pathBatchQueue || (g.path < 0 && g.n%2 == 0)
	g.n++
	sched := g.ns(20e3, 2e6)
	meta := g.ns(1e3, 80e3)
	upd := g.ns(30e3, 3e6)
	gf := g.ns(1e3, 50e3)
	gpu := g.ns(200e3, 40e6)
	launch := g.ns(100e3, 8e6)
	wait := g.ns(1e3, 30e6) * int64(bits.OnesCount8(uint8(g.rng.Uint32()))&1) // absent on half the lines
	exec := launch + gpu
	un := g.ns(5e3, 400e3)
	step := sched + upd + un
	if bq {
		step += launch + wait
	} else {
		step += exec
	}
	g.ts += step/1000 + int64(g.rng.IntN(50))
	run := 1 + g.rng.IntN(1024)
	b = append(b, `{"ts_us":`...)
	b = strconv.AppendInt(b, g.ts, 10)
	field := func(k string, ns int64) {
		b = append(append(append(b, ',', '"'), k...), '"', ':')
		b = appendUs(b, ns)
	}
	field("step_duration_us", step)
	field("schedule_us", sched)
	field("build_meta_us", meta)
	if bq {
		field("launch_us", launch)
		if wait > 0 {
			field("wait_us", wait)
		}
	} else {
		field("execute_us", exec)
	}
	field("update_us", upd)
	field("get_finished_us", gf)
	field("unaccounted_us", un)
	field("gpu_us", gpu)
	b = append(b, `,"batch":`...)
	b = strconv.AppendInt(b, g.n, 10)
	b = append(b, `,"num_running":`...)
	b = strconv.AppendInt(b, int64(run), 10)
	b = append(b, `,"num_waiting":`...)
	b = strconv.AppendInt(b, int64(g.rng.IntN(64)), 10)
	pre := g.rng.IntN(4) * g.rng.IntN(2048)
	b = append(b, `,"num_prefill_tokens":`...)
	b = strconv.AppendInt(b, int64(pre), 10)
	b = append(b, `,"num_decode_tokens":`...)
	b = strconv.AppendInt(b, int64(run), 10)
	if bq {
		b = append(b, `,"batch_queue":1`...)
	}
	return append(b, `,"pid":31337}`+"\n"...)
}
