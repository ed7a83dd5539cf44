package openloop

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// llamaEnd is the tail of a llama-server completions stream that ends at
// end of generation (tools/server/server-context.cpp:1833-1877,
// server-task.cpp:374-410 and 1073-1110 at 80fb11ac): the end-of-generation
// token as a chunk with empty text, then the final chunk, empty text with
// finish_reason "stop" and the usage in the same chunk.
func llamaEnd(tokens string) string {
	return `data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":null}],"object":"text_completion"}` + "\n\n" +
		`data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"stop"}],"object":"text_completion","usage":{"completion_tokens":` + tokens +
		`,"prompt_tokens":5,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":0}}}` + "\n\ndata: [DONE]\n\n"
}

// TestConsumeNaturalEnd: the times follow vLLM's client to the chunk — the
// first and the last chunk that carry choices, empty text included — and
// a natural end with no text at all is a response, not an error, while a
// stream the engine's own usage counts as empty is empty_stream. The clock
// ticks 10 per event, so each time is exact.
func TestConsumeNaturalEnd(t *testing.T) {
	for _, tc := range []struct {
		name                string
		in                  string
		first, last         int64
		itl, chunks, tokens int
		finish              string
		class               ErrorClass
	}{
		// two words, then the end-of-generation token and the final chunk:
		// the end is the final chunk (40), not the last word (20).
		{"two words then EOS", chunkLine("a") + chunkLine("b") + llamaEnd("3"), 10, 40, 3, 2, 3, "stop", ""},
		// the engine's one-token answer: no text at all, usage 1.
		{"one-token answer", llamaEnd("1"), 10, 20, 1, 0, 1, "stop", ""},
		// an empty first chunk is the first token, as in vLLM's client.
		{"empty first chunk", chunkLine("") + chunkLine("a") + usageLine + "data: [DONE]\n\n", 10, 20, 1, 1, 3, "", ""},
		// a finish reason without usage is a natural end too.
		{"finish without usage", strings.Replace(llamaEnd("1"), `,"usage":{"completion_tokens":1,"prompt_tokens":5,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":0}}`, "", 1), 10, 20, 1, 0, 0, "stop", ""},
		// the engine produced nothing: its usage says 0.
		{"usage zero", llamaEnd("0"), 10, 20, 1, 0, 0, "stop", ErrClassEmptyStream},
		// no chunk with choices at all.
		{"usage only", usageLine + "data: [DONE]\n\n", 0, 0, 0, 0, 3, "", ErrClassEmptyStream},
		// empty chunks, no finish reason, no usage: nothing produced.
		{"empty chunks only", chunkLine("") + chunkLine("") + "data: [DONE]\n\n", 10, 20, 1, 0, 0, "", ErrClassEmptyStream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st streamState
			tick := int64(0)
			if err := st.consume(newSSEReader(iotest.HalfReader(strings.NewReader(tc.in))), func() int64 { tick += 10; return tick }); err != nil {
				t.Fatal(err)
			}
			if st.firstNs != tc.first || st.lastNs != tc.last || len(st.itlMs()) != tc.itl || st.chunks != tc.chunks || st.usageOut != tc.tokens || st.finish != tc.finish {
				t.Errorf("first %d last %d itl %d content chunks %d usage %d finish %q; want %d %d %d %d %d %q",
					st.firstNs, st.lastNs, len(st.itlMs()), st.chunks, st.usageOut, st.finish, tc.first, tc.last, tc.itl, tc.chunks, tc.tokens, tc.finish)
			}
			if class, why := st.check(16); class != tc.class {
				t.Errorf("class %q (%s), want %q", class, why, tc.class)
			}
		})
	}
}

// TestNaturalEndsThroughRun: against a server that ends streams the way
// llama-server does (the stub's EOSAt), every natural end is a completed
// request with the engine's token count and finish reason, its E2EL runs
// to the final chunk (one more gap than content chunks), and a one-token
// answer is a response with a TTFT and no TPOT.
func TestNaturalEndsThroughRun(t *testing.T) {
	eosAt := []int{1, 2, 5, 16}
	s := startStub(t, stub.Options{Gap: time.Millisecond, Fault: func(_ int64, id string) stub.Fault {
		i, _ := strconv.Atoi(id)
		return stub.Fault{EOSAt: eosAt[i%len(eosAt)]}
	}})
	res, err := Run(context.Background(), Config{Targets: []string{s.URL}, Model: "m", Rate: 200, Arrival: Arrival{Process: ArrivalConstant},
		Shape: Shape{Input: 8, Output: 16}, Request: Request{NaturalLength: true}, Requests: 4 * len(eosAt), RequestIDPrefix: "t-"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Records {
		k := eosAt[r.ID%len(eosAt)]
		if !r.OK() {
			t.Errorf("request %d (EOS at token %d): %s %s", r.ID, k, r.ErrorClass, r.Error)
			continue
		}
		if r.OutputTokens != k || r.FinishReason != FinishStop || len(r.ITLMs) != k || r.UsageMissing {
			t.Errorf("request %d (EOS at token %d): %d tokens, finish %q, %d gaps; want %d, stop, %d", r.ID, k, r.OutputTokens, r.FinishReason, len(r.ITLMs), k, k)
		}
		if _, ok := r.TTFTMs(); !ok {
			t.Errorf("request %d: no TTFT", r.ID)
		}
		if _, ok := r.TPOTMs(); ok != (k > 1) {
			t.Errorf("request %d (EOS at token %d): TPOT measured %v, want %v", r.ID, k, ok, k > 1)
		}
	}
}

// TestWarmupDrainsBeforeMeasure: the measured phase begins — Config.OnPhase
// runs and the first measured request leaves — only once every warm-up
// request has finished, in the open loop and the closed loop alike, so an
// engine counter snapshotted there holds none of the warm-up's work. The
// stub holds each request 30 ms at a rate that would otherwise overlap
// them.
func TestWarmupDrainsBeforeMeasure(t *testing.T) {
	for _, arr := range []Arrival{{Process: ArrivalPoisson}, {Process: ArrivalConcurrency, InFlight: 3}} {
		t.Run(arr.Process, func(t *testing.T) {
			s := startStub(t, stub.Options{FirstToken: 30 * time.Millisecond, Gap: time.Millisecond})
			var warmDoneAtMeasure, finished int
			cfg := Config{Targets: []string{s.URL}, Model: "m", Rate: 200, Arrival: arr, Shape: Shape{Input: 8, Output: 4},
				Warmup: 4, Requests: 12, Seed: 5}
			if arr.Process == ArrivalConcurrency {
				cfg.Rate = 0 // a closed loop has none
			}
			cfg.OnPhase = func(p string) {
				if p == PhaseMeasure {
					warmDoneAtMeasure = len(s.Entries())
				}
			}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var lastWarmDone, firstMeasureSent int64 = 0, -1
			for _, rec := range res.Records {
				switch rec.Phase {
				case PhaseWarmup:
					finished++
					lastWarmDone = max(lastWarmDone, rec.DoneNs)
				case PhaseMeasure:
					if firstMeasureSent < 0 || rec.SentNs < firstMeasureSent {
						firstMeasureSent = rec.SentNs
					}
				}
			}
			if finished != 4 || warmDoneAtMeasure != 4 || firstMeasureSent < lastWarmDone {
				t.Errorf("%d warm-up records, %d finished at the server when the measured phase began (want 4, 4); first measured send %d, last warm-up done %d",
					finished, warmDoneAtMeasure, firstMeasureSent, lastWarmDone)
			}
		})
	}
}
