package main

import (
	"strings"
	"testing"

	"github.com/mbench/mbench/openloop"
)

// TestBenchSummary: per client, the runs each rate held and the highest
// rate held in ≥ 4 of 5; with a compared client, the ratio of those rates
// and of the client CPU (medians) at the highest rate both held.
func TestBenchSummary(t *testing.T) {
	var rows []openloop.PrecisionRow
	add := func(client string, rate float64, held int, cpu float64) {
		for i := range 5 {
			rows = append(rows, openloop.PrecisionRow{Client: client, Rate: rate, Holds: i < held, ClientCPUMsReq: cpu + float64(i)/100})
		}
	}
	add("mbench", 100, 5, 0.30)
	add("mbench", 1000, 4, 0.20)
	add("mbench", 2000, 3, 0.15)
	add("vllm", 100, 5, 1.00)
	add("vllm", 1000, 1, 0.90)
	clients := []benchClient{{name: "mbench"}, {name: "vllm", rates: []float64{100, 1000}}}
	var b strings.Builder
	writeBenchSummary(&b, rows, clients, []float64{100, 1000, 2000}, 5)
	got := b.String()
	for _, want := range []string{
		"mbench: rate 2000 holds in 3 of 5 runs\n",
		"mbench: highest rate holding achieved/offered >= 0.99 and lag p99 <= 5 ms in >= 4 of 5 runs: 1000 req/s\n",
		"vllm: highest rate holding achieved/offered >= 0.99 and lag p99 <= 5 ms in >= 4 of 5 runs: 100 req/s\n",
		"mbench holds 10× the rate vllm holds (1000 vs 100 req/s)\n",
		"at 100 req/s: client CPU 0.320 ms/req (mbench) vs 1.020 (vllm), 0.31× (medians of the runs)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "vllm: rate 2000") {
		t.Errorf("vllm did not run at 2000:\n%s", got)
	}
}
