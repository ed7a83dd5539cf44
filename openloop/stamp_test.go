package openloop

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// TestSendStampPrecedesServer holds every request's times to physics, at a
// few rates and over both I/O paths, against the stub's own log (its
// handler entry, and the moment just before it flushed the first token):
// a request cannot reach the server's handler before the client handed its
// last byte to the kernel, nor its first token reach the client before the
// server flushed it, so the client's send time is never after the server's
// arrival, its first token never before the server's flush, and its TTFT
// never below the server's. On a loaded machine the scheduler can delay
// any of the client's clock reads; the rule is that a delay may only
// lengthen what the client reports, never shorten it. (Stamped after the
// write, 1–6% of sends at 300–1,000 req/s read late here, by up to 5 ms.)
func TestSendStampPrecedesServer(t *testing.T) {
	const slack = time.Microsecond // both sides read the same monotonic clock
	s := startStub(t, stub.Options{Tokens: 4, FirstToken: 2 * time.Millisecond, Gap: 500 * time.Microsecond})
	for _, io := range []string{"reactor", "goroutines"} {
		for _, rate := range []float64{300, 1000} {
			t.Run(fmt.Sprintf("%s/%g", io, rate), func(t *testing.T) {
				s.Reset()
				_, res := runIO(t, Config{Targets: []string{s.URL}, Model: "stub-model", Rate: rate, Shape: Shape{Input: 256, Output: 4},
					Warmup: int(rate / 10), Duration: time.Second, Seed: 3}, io)
				byID := map[string]stub.Entry{}
				for _, e := range s.Entries() {
					byID[e.RequestID] = e
				}
				var errs, sendSide, recvSide []time.Duration
				var bad []string
				for _, r := range res.Records {
					e, ok := byID[r.RequestID]
					if !r.OK() || !ok || e.FirstFlush.IsZero() {
						t.Fatalf("record %d: %s %q, logged by the stub %v", r.ID, r.Status, r.Error, ok)
					}
					sent, first := res.Start.Add(time.Duration(r.SentNs)), res.Start.Add(time.Duration(r.FirstTokenNs))
					if d := sent.Sub(e.Arrival); d > slack {
						bad = append(bad, fmt.Sprintf("%d: sent %v after the server's handler entry", r.ID, d))
					}
					if d := e.FirstFlush.Sub(first); d > slack {
						bad = append(bad, fmt.Sprintf("%d: first token %v before the server flushed it", r.ID, d))
					}
					errs = append(errs, r.TTFT()-e.TTFT())
					sendSide, recvSide = append(sendSide, e.Arrival.Sub(sent)), append(recvSide, first.Sub(e.FirstFlush))
				}
				for _, d := range [][]time.Duration{errs, sendSide, recvSide} {
					sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
				}
				q := func(d []time.Duration, p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
				t.Logf("%d requests: TTFT client − server min %v p50 %v p99 %v max %v; of which send to handler entry p50 %v p99 %v, flush to first token p50 %v p99 %v",
					len(errs), errs[0], q(errs, 0.5), q(errs, 0.99), errs[len(errs)-1], q(sendSide, 0.5), q(sendSide, 0.99), q(recvSide, 0.5), q(recvSide, 0.99))
				if len(bad) > 0 {
					t.Errorf("%d of %d requests break causality: %s", len(bad), len(res.Records), strings.Join(bad[:min(len(bad), 8)], "; "))
				}
				if errs[0] < -2*slack {
					t.Errorf("a client TTFT below the server's by %v", -errs[0])
				}
			})
		}
	}
}
