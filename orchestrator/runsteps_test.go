package orchestrator

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mbench/mbench/matrices"
)

// fileHost is a fakeHost that serves files from memory (Size, Get).
type fileHost struct {
	fakeHost
	files map[string][]byte
}

func (h *fileHost) Size(_ context.Context, p string) (int64, error) {
	b, ok := h.files[p]
	if !ok {
		return -1, os.ErrNotExist
	}
	return int64(len(b)), nil
}

func (h *fileHost) Get(_ context.Context, p string, off int64, w io.Writer) (int64, error) {
	b := h.files[p]
	if off > int64(len(b)) {
		return 0, nil
	}
	n, err := w.Write(b[off:])
	return int64(n), err
}

// countingHost is a fileHost that counts the commands a host would run.
type countingHost struct {
	fileHost
	sizes, gets int
}

func (h *countingHost) Size(ctx context.Context, p string) (int64, error) {
	h.sizes++
	return h.fileHost.Size(ctx, p)
}

func (h *countingHost) Get(ctx context.Context, p string, off int64, w io.Writer) (int64, error) {
	h.gets++
	return h.fileHost.Get(ctx, p, off, w)
}

// TestLastStepEndUsOneCommand: once a poll knows the log's size, the next
// reads the last step and the new size with one command (a read from 8 KiB
// before the known size); a log shorter than known is asked afresh.
func TestLastStepEndUsOneCommand(t *testing.T) {
	var log []byte
	for i := int64(1); i <= 400; i++ { // about 22 KiB: more than the 8 KiB tail
		log = append(log, stepLine(1_000_000*i)...)
	}
	h := &countingHost{fileHost: fileHost{files: map[string][]byte{"/s.jsonl": log}}}
	p := &engineProc{host: h, stepLog: "/s.jsonl"}
	ts, size := lastStepEndUs(context.Background(), p, -1)
	if ts != 400_000_000 || size != int64(len(log)) || h.sizes != 1 || h.gets != 1 {
		t.Fatalf("first poll: ts %d size %d (want 400000000, %d), %d sizes %d reads", ts, size, len(log), h.sizes, h.gets)
	}
	grown := append(append([]byte{}, log...), stepLine(401_000_000)+stepLine(402_000_000)...)
	h.files["/s.jsonl"] = grown
	ts, size = lastStepEndUs(context.Background(), p, size)
	if ts != 402_000_000 || size != int64(len(grown)) || h.sizes != 1 || h.gets != 2 {
		t.Fatalf("next poll: ts %d size %d (want 402000000, %d), %d sizes %d reads; want no size asked", ts, size, len(grown), h.sizes, h.gets)
	}
	short := []byte(stepLine(7))
	h.files["/s.jsonl"] = short
	ts, size = lastStepEndUs(context.Background(), p, size)
	if ts != 7 || size != int64(len(short)) {
		t.Fatalf("a new, shorter log: ts %d size %d, want 7 and %d", ts, size, len(short))
	}
}

func stepLine(tsUs int64) string {
	return fmt.Sprintf(`{"ts_us":%d,"step_duration_us":500.5,"num_running":1}`+"\n", tsUs)
}

// TestStepLogSteps: the offsets taken before a run are the logs' sizes, and
// the wait for the step log to be flushed ends at the event — a step past
// the window — not after its bound; for the sim, an idle log whose last step
// closes the window is complete too.
func TestStepLogSteps(t *testing.T) {
	end := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	h := &fileHost{files: map[string][]byte{
		"/a.jsonl": []byte(stepLine(end.UnixMicro()-5000) + stepLine(end.UnixMicro()+800)),
		"/b.jsonl": []byte(stepLine(end.UnixMicro() - 20_000)),
	}}
	es := &engineSet{procs: []*engineProc{{host: h, stepLog: "/a.jsonl"}, {host: h, stepLog: "/b.jsonl"}, {host: h}}}
	if got := stepLogOffsets(context.Background(), es); got[0] != int64(len(h.files["/a.jsonl"])) || got[1] != int64(len(h.files["/b.jsonl"])) || got[2] != 0 {
		t.Errorf("offsets %v", got)
	}
	m, err := loadFleetMatrix(t)
	if err != nil {
		t.Fatal(err)
	}
	s := &runner{m: m}
	cases := []struct {
		name    string
		procs   []*engineProc
		sim     bool
		maxWait time.Duration // the wait must end before this (its bound is 10 s)
	}{
		{"a step past the window", es.procs[:1], false, 5 * time.Second},
		{"vllm, idle before the window's end: the bound", es.procs[1:2], false, 0},
		{"sim, idle log closing the window", []*engineProc{{host: &fileHost{files: map[string][]byte{"/c": []byte(stepLine(end.UnixMicro() - 1000))}}, stepLog: "/c"}}, true, 5 * time.Second},
	}
	// The waits run on synctest's clock: the bounds are the logic's.
	synctest.Test(t, func(t *testing.T) {
		for _, c := range cases {
			s.m.Engine.Kind = matrices.EngineVLLM
			if c.sim {
				s.m.Engine.Kind = matrices.EngineSim
			}
			limit := 10 * time.Second
			if c.maxWait == 0 {
				limit = 30 * time.Millisecond
			}
			t0 := time.Now()
			if err := s.waitStepsFlushed(context.Background(), &engineSet{procs: c.procs}, end, limit); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(t0); c.maxWait > 0 && el >= c.maxWait {
				t.Errorf("%s: waited %v", c.name, el)
			} else if c.maxWait == 0 && el < limit {
				t.Errorf("%s: returned after %v, before its bound %v, with no step past the window", c.name, el, limit)
			}
		}
	})
}
