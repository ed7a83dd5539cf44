package probes

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

func TestMergeWorkerTimings(t *testing.T) {
	main := strings.Join([]string{
		`{"ts_us":1100,"step_duration_us":100,"schedule_us":5}`,    // (1000,1100]
		`{"ts_us":1300,"step_duration_us":150,"pid":9}`,            // (1150,1300]
		`{"ts_us":1400,"step_duration_us":50,"get_finished_us":7}`, // has its own
		`not json`, // copied through
		`{"ts_us":1600,"step_duration_us":100}  `,                      // (1500,1600]: no worker lines
		`{"ts_us":1800,"step_duration_us":100,"get_finished_us":null}`, // (1700,1800]
	}, "\n") + "\n"
	w1 := strings.Join([]string{
		`{"ts_us":1000,"get_finished_us":99,"pid":11}`, // on the open bound: not in (1000,1100]
		`{"ts_us":1050,"get_finished_us":3,"pid":11}`,
		`{"ts_us":1100,"get_finished_us":4,"pid":11}`,
		`{"ts_us":1120,"get_finished_us":50,"pid":11}`, // between steps
		`{"ts_us":1200,"get_finished_us":6,"pid":11}`,
		`garbage`,
		`{"ts_us":1750,"get_finished_us":1.5,"pid":11}`,
	}, "\n")
	w2 := strings.Join([]string{
		`{"ts_us":1060,"get_finished_us":2,"pid":12}`,
		`{"ts_us":1250,"get_finished_us":10,"pid":12}`,
		`{"ts_us":1290,"get_finished_us":1,"pid":12}`,
		`{"ts_us":1390,"get_finished_us":100,"pid":12}`, // in a step with its own: unmatched
		`{"ts_us":1900,"get_finished_us":5,"pid":12}`,   // after the last step: unmatched
	}, "\n")
	var out bytes.Buffer
	st, err := MergeWorkerTimings(context.Background(), strings.NewReader(main),
		[]io.Reader{strings.NewReader(w1), strings.NewReader(w2)}, &out)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		`{"ts_us":1100,"step_duration_us":100,"schedule_us":5,"get_finished_us":7}`, // max(3+4, 2)
		`{"ts_us":1300,"step_duration_us":150,"pid":9,"get_finished_us":11}`,        // max(6, 10+1)
		`{"ts_us":1400,"step_duration_us":50,"get_finished_us":7}`,
		`not json`,
		`{"ts_us":1600,"step_duration_us":100}  `,
		`{"ts_us":1800,"step_duration_us":100,"get_finished_us":null,"get_finished_us":1.5}`,
	}, "\n") + "\n"
	if out.String() != want {
		t.Fatalf("merged:\n%s\nwant:\n%s", out.String(), want)
	}
	// Every worker line counted once: 7 merged; 1000, 1120, 1390, 1900 unmatched.
	if st != (MergeStats{Steps: 6, Merged: 3, MainMalformed: 1, WorkerLines: 12, WorkerMalformed: 1,
		WorkerMerged: 7, WorkerUnmatched: 4}) {
		t.Errorf("stats %+v", st)
	}
	if st.WorkerLines != st.WorkerMalformed+st.WorkerMerged+st.WorkerUnmatched {
		t.Errorf("worker lines not all counted: %+v", st)
	}
	// The merged log summarizes with get_finished_us present.
	ss, _ := SummarizeSteps(context.Background(), &out, 0, 0, nil)
	if q := ss.Timers["get_finished_us"]; q.N != 4 || q.Max != 11 {
		t.Errorf("get_finished %+v", q)
	}
	if g := WorkerLogGlob("/r/engine_step.jsonl"); g != "/r/engine_step.worker.*.jsonl" {
		t.Errorf("glob %s", g)
	}
}

// Status and GPU lines of the main log pass through the merge unchanged
// and are not counted as malformed steps.
func TestMergeWorkerTimingsKeepsStatusAndGPULines(t *testing.T) {
	main := `{"ts_us":5,"status":"engine","pid":7,"gpu_time":"measured"}
{"ts_us":100,"step_duration_us":50,"pid":7}
{"ts_us":110,"gpu_us":12.5,"gpu_batch":1,"pid":7}
`
	worker := `{"ts_us":90,"get_finished_us":3,"pid":9}` + "\n"
	var out bytes.Buffer
	st, err := MergeWorkerTimings(context.Background(), strings.NewReader(main), []io.Reader{strings.NewReader(worker)}, &out)
	if err != nil || st.MainMalformed != 0 || st.Steps != 1 || st.WorkerMerged != 1 {
		t.Fatalf("%+v %v", st, err)
	}
	ss, _ := SummarizeSteps(context.Background(), &out, 0, 0, nil)
	if ss.NSteps != 1 || ss.Malformed != 0 || len(ss.Engines) != 1 || ss.GPU.Late != 1 || ss.Timers["get_finished_us"].N != 1 {
		t.Fatalf("%+v", ss)
	}
}
