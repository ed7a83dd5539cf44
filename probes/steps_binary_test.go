package probes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"
)

// binStep is a binary step record with the given payload slots.
func binStep(v [stepRecSlots]int64) []byte {
	b := []byte{recMark, recKindStep, 1, 0}
	b = binary.LittleEndian.AppendUint32(b, stepRecSlots*8)
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

func sampleSlots(ts int64, bq bool) [stepRecSlots]int64 {
	var v [stepRecSlots]int64
	v[slotTs], v[slotDur], v[slotSched], v[slotUpd] = ts, 10_500, 2_000, 3_000
	v[slotLaunch], v[slotWait], v[slotExec], v[slotGPU], v[slotBatch] = 1_000, 500, 4_000, 7_250, 3
	v[slotRunning], v[slotWaiting], v[slotTotal], v[slotDecode] = 4, 1, 9, 4
	v[slotFlags] = hookedSched | hookedExec | hookedUpd | hookedLaunch
	if bq {
		v[slotFlags] |= flagBatchQueue
	}
	v[slotPID] = 77
	return v
}

// TestPluginBinaryMatchesPythonReader: the plugin's raw log (binary step
// records and status lines, written by vllm/tests/test_log_contract.py)
// decodes to exactly the records the plugin's own reader made of it
// (plugin_batch_queue.jsonl), and summarizes the same.
func TestPluginBinaryMatchesPythonReader(t *testing.T) {
	raw, err := os.ReadFile("testdata/plugin_batch_queue.steplog")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/plugin_batch_queue.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.IndexByte(raw, recMark) < 0 {
		t.Fatal("the raw sample has no binary record")
	}
	var got bytes.Buffer
	st, err := SummarizeSteps(context.Background(), bytes.NewReader(raw), 0, 0, &got)
	if err != nil || st.Malformed != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	st2, err := SummarizeSteps(context.Background(), bytes.NewReader(want), 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.NSteps != st2.NSteps || st.GPU != st2.GPU || len(st.Timers) != len(st2.Timers) {
		t.Fatalf("binary %+v\njsonl %+v", st, st2)
	}
	for k, q := range st2.Timers {
		if st.Timers[k] != q {
			t.Errorf("%s: binary %+v jsonl %+v", k, st.Timers[k], q)
		}
	}
	gl := strings.Split(strings.TrimSpace(got.String()), "\n")
	wl := strings.Split(strings.TrimSpace(string(want)), "\n")
	// The copy drops nothing but keeps status lines once per flush, as written.
	if len(gl) != len(wl) {
		t.Fatalf("%d lines decoded, %d in the sample", len(gl), len(wl))
	}
	for i := range wl {
		var a, b StepRecord
		ea, eb := ParseStepLine([]byte(gl[i]), &a), ParseStepLine([]byte(wl[i]), &b)
		if (ea == nil) != (eb == nil) || a != b {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, gl[i], wl[i])
		}
	}
}

func TestBinaryRecordFields(t *testing.T) {
	var log []byte
	log = append(log, `{"ts_us":5,"status":"engine","pid":77,"plugin":"x","vllm":"y","gpu_time":"measured","gpu_hook":"h"}`+"\n"...)
	log = append(log, binStep(sampleSlots(100, true))...)
	log = append(log, binStep(sampleSlots(200, false))...)
	g := []byte{recMark, recKindGPU, 1, 0}
	g = binary.LittleEndian.AppendUint32(g, gpuRecSlots*8)
	for _, x := range []int64{300, 9, 1_500, 77} {
		g = binary.LittleEndian.AppendUint64(g, uint64(x))
	}
	log = append(log, g...)
	var out bytes.Buffer
	st, err := SummarizeSteps(context.Background(), bytes.NewReader(log), 0, 0, &out)
	if err != nil || st.Malformed != 0 || st.NSteps != 2 || st.BatchQueueSteps != 1 || st.GPU.Late != 1 || len(st.Engines) != 1 {
		t.Fatalf("%+v %v", st, err)
	}
	want := []string{
		`{"ts_us":5,"status":"engine","pid":77,"plugin":"x","vllm":"y","gpu_time":"measured","gpu_hook":"h"}`,
		// bq: launch and wait replace execute; unaccounted = 10.5 - 2 - 1 - 0.5 - 3.
		`{"ts_us":100,"step_duration_us":10.5,"schedule_us":2,"launch_us":1,"wait_us":0.5,"update_us":3,"unaccounted_us":4,"gpu_us":7.25,"batch":3,"num_running":4,"num_waiting":1,"num_prefill_tokens":5,"num_decode_tokens":4,"batch_queue":1,"pid":77}`,
		`{"ts_us":200,"step_duration_us":10.5,"schedule_us":2,"execute_us":4,"update_us":3,"unaccounted_us":1.5,"gpu_us":7.25,"batch":3,"num_running":4,"num_waiting":1,"num_prefill_tokens":5,"num_decode_tokens":4,"pid":77}`,
		`{"ts_us":300,"gpu_us":1.5,"gpu_batch":9,"pid":77}`,
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A timer whose hook is not applied is absent, even if its slot has time.
	v := sampleSlots(400, false)
	v[slotFlags] &^= hookedSched
	var rec StepRecord
	stepFromSlots(v[:], &rec)
	if _, ok := rec.Get(FieldSchedule); ok {
		t.Error("schedule_us present without its hook")
	}
	if u, _ := rec.Get(FieldUnaccounted); u != 3.5 {
		t.Errorf("unaccounted %v, want 3.5", u)
	}
}

// TestBinaryCorruptionIsCountedOnce: a truncated record, a bad header and a
// fetch that starts inside a record are each one malformed record; the
// records after them are read.
func TestBinaryCorruptionIsCountedOnce(t *testing.T) {
	rec := binStep(sampleSlots(100, true))
	cases := []struct {
		name string
		log  []byte
		want int64 // steps read
	}{
		{"starts inside a record", append(append(append([]byte{}, rec[37:]...), rec...), rec...), 2},
		{"bad header between", append(append(append(append([]byte{}, rec...), 0xFF, 'Q', 1, 0, 8, 0, 0, 0, 0xFF, 0xFF), rec...), rec...), 3},
		{"truncated at the end", append(append(append([]byte{}, rec...), rec...), rec[:50]...), 2},
		{"text then binary", append([]byte(`{"ts_us":1,"step_duration_us":2,"pid":1}`+"\n"), rec...), 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := SummarizeSteps(context.Background(), bytes.NewReader(c.log), 0, 0, nil)
			if err != nil || st.NSteps != c.want {
				t.Fatalf("%+v %v", st, err)
			}
			if c.name != "text then binary" && st.Malformed != 1 {
				t.Errorf("malformed %d (%s), want 1", st.Malformed, st.FirstMalformed)
			}
		})
	}
}

func TestLastStepEndUs(t *testing.T) {
	var log []byte
	for ts := int64(1); ts <= 100; ts++ {
		log = append(log, binStep(sampleSlots(ts*1000, true))...)
	}
	for _, cut := range []int{0, 7, 144 * 3, len(log) - 3000} {
		tail := log[cut:]
		if ts, ok := LastStepEndUs(tail); !ok || ts != 100_000 {
			t.Errorf("cut %d: %d %v", cut, ts, ok)
		}
		if ts, ok := LastStepEndUs(tail[:len(tail)-10]); !ok || ts != 99_000 {
			t.Errorf("cut %d, partial last record: %d %v", cut, ts, ok)
		}
	}
	text := []byte("{\"ts_us\":7,\"step_duration_us\":1}\n{\"ts_us\":9,\"step_duration_us\":1}\n{\"ts_us\":11,\"st")
	if ts, ok := LastStepEndUs(text); !ok || ts != 9 {
		t.Errorf("text: %d %v", ts, ok)
	}
}

func TestMergeWorkerTimingsBinaryMain(t *testing.T) {
	main := binStep(sampleSlots(100, false))
	worker := `{"ts_us":99,"get_finished_us":2.5,"pid":5}` + "\n"
	var out bytes.Buffer
	ms, err := MergeWorkerTimings(context.Background(), bytes.NewReader(main), []io.Reader{strings.NewReader(worker)}, &out)
	if err != nil || ms.Merged != 1 || ms.WorkerMerged != 1 {
		t.Fatalf("%+v %v", ms, err)
	}
	var rec StepRecord
	if err := ParseStepLine(bytes.TrimSpace(out.Bytes()), &rec); err != nil {
		t.Fatal(err, out.String())
	}
	if gf, ok := rec.Get(FieldGetFinished); !ok || gf != 2.5 {
		t.Errorf("%s", out.String())
	}
}

// FuzzStepLog: any bytes summarize without a panic; every record read
// is a step, a status/GPU line or malformed; the JSONL copy summarizes to
// the same step count.
func FuzzStepLog(f *testing.F) {
	if raw, err := os.ReadFile("testdata/plugin_batch_queue.steplog"); err == nil {
		f.Add(raw)
	}
	f.Add(append(binStep(sampleSlots(5, true)), "{\"ts_us\":1,\"step_duration_us\":2}\n"...))
	f.Fuzz(func(t *testing.T, data []byte) {
		var copy1 bytes.Buffer
		st, err := SummarizeSteps(context.Background(), bytes.NewReader(data), 0, 0, &copy1)
		if err != nil {
			t.Fatal(err)
		}
		st2, err := SummarizeSteps(context.Background(), bufio.NewReader(&copy1), 0, 0, nil)
		if err != nil || st2.NSteps != st.NSteps {
			t.Fatalf("copy: %d steps, original %d (%v)", st2.NSteps, st.NSteps, err)
		}
		LastStepEndUs(data)
	})
}

// TestHostBoundGPUSpans: a GPU span the plugin marked host-bound (flag bit
// 1 of a step record, the fifth slot of a GPU record, gpu_host_bound in
// JSONL) is kept as such in the copy and left out of gpu_us: counted apart,
// with its median, and where every span is host-bound GPU time is not
// measured and the reason says why. A GPU record of four slots (before the
// flag) still reads as GPU time.
func TestHostBoundGPUSpans(t *testing.T) {
	gpuRec := func(slots ...int64) []byte {
		g := []byte{recMark, recKindGPU, 1, 0}
		g = binary.LittleEndian.AppendUint32(g, uint32(8*len(slots)))
		for _, x := range slots {
			g = binary.LittleEndian.AppendUint64(g, uint64(x))
		}
		return g
	}
	exact, hb := sampleSlots(100, true), sampleSlots(200, true)
	hb[slotGPU], hb[slotFlags] = 900_000, hb[slotFlags]|flagGPUHost
	var log []byte
	log = append(log, binStep(exact)...)
	log = append(log, binStep(hb)...)
	log = append(log, gpuRec(300, 9, 800_000, 77, flagGPUHost)...) // host-bound GPU record
	log = append(log, gpuRec(400, 10, 2_000, 77)...)               // old four-slot GPU record
	log = append(log, `{"ts_us":500,"step_duration_us":10,"gpu_us":1000,"gpu_host_bound":1,"batch":11,"pid":77}`+"\n"...)
	var out bytes.Buffer
	st, err := SummarizeSteps(context.Background(), bytes.NewReader(log), 0, 0, &out)
	if err != nil || st.Malformed != 0 || st.NSteps != 3 {
		t.Fatalf("%+v %v", st, err)
	}
	if g := st.GPU; !g.Measured || g.Steps != 1 || g.Late != 1 || g.HostBound != 3 || g.HostBoundSpanP50 < 850 || g.HostBoundSpanP50 > 950 {
		t.Errorf("GPU %+v: want 1 step + 1 late GPU line measured, 3 host-bound with span p50 ~900 µs", g)
	}
	if q := st.Timers["gpu_us"]; q.P99 > 7.25+1e-9 || q.P50 < 2-1e-9 {
		t.Errorf("gpu_us %+v: host-bound spans (800-1000 µs) entered GPU time (7.25 and 2 µs)", q)
	}
	copied := out.String()
	if strings.Count(copied, `"gpu_host_bound":1`) != 3 {
		t.Errorf("the copy keeps the host-bound marks of 3 records:\n%s", copied)
	}
	// Every span host-bound: not measured, and why.
	st, err = SummarizeSteps(context.Background(), bytes.NewReader(binStep(hb)), 0, 0, nil)
	if err != nil || st.GPU.Measured || !strings.Contains(st.GPU.Reason, "host-bound") || st.Timers["gpu_us"].P50 != 0 {
		t.Errorf("all host-bound: %+v %v", st.GPU, err)
	}
}

// TestPluginHostBoundSample: the plugin's raw log of an eager forward on
// an idle GPU (written by vllm/tests/test_log_contract.py, every collecting
// line's span marked host-bound) summarizes as GPU time not measured, each
// marked span counted apart, none in gpu_us; and it decodes to the lines
// the plugin's own reader made of it.
func TestPluginHostBoundSample(t *testing.T) {
	raw, err := os.ReadFile("testdata/plugin_host_bound.steplog")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/plugin_host_bound.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	marked := int64(bytes.Count(want, []byte(`"gpu_host_bound":1`)))
	var copied bytes.Buffer
	st, err := SummarizeSteps(context.Background(), bytes.NewReader(raw), 0, 0, &copied)
	if err != nil || st.Malformed != 0 || st.NSteps != 12 {
		t.Fatalf("%+v %v", st, err)
	}
	if g := st.GPU; g.Measured || g.HostBound != marked || marked < 10 || !strings.Contains(g.Reason, "host-bound") || g.HostBoundSpanP50 <= 0 {
		t.Errorf("GPU %+v: want not measured, %d host-bound spans", g, marked)
	}
	if _, ok := st.Timers["gpu_us"]; ok {
		t.Errorf("gpu_us %+v from host-bound spans", st.Timers["gpu_us"])
	}
	if got := int64(bytes.Count(copied.Bytes(), []byte(`"gpu_host_bound":1`))); got != marked {
		t.Errorf("the copy keeps %d marks, the plugin's reader %d", got, marked)
	}
}
