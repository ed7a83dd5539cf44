package results

import (
	"math"
	"sort"
	"strings"
	"testing"
)

// linearPercentile is numpy's default percentile (linear interpolation
// between closest ranks), as vllm bench serve computes it, written out here
// independently of stats.
func linearPercentile(xs []float64, p float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	h := p / 100 * float64(len(s)-1)
	lo := math.Floor(h)
	if int(lo)+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[int(lo)] + (h-lo)*(s[int(lo)+1]-s[int(lo)])
}

// TestPercentilesAndOutputLengths: p95 of every metric is always there,
// a percentile asked for beyond the defaults is under its vLLM key, each
// equal to numpy's percentile of the per-request values; the output-length
// distribution is that of the completed measured requests.
func TestPercentilesAndOutputLengths(t *testing.T) {
	var recs []Record
	var ttft, e2el []float64
	lens := []int{3, 9, 4, 12, 7, 5, 8, 2, 11, 6, 10, 4}
	for i, n := range lens {
		r := okRecord(i, int64(1000+100*i)*ms, 20+float64((i*7)%11), n, 5)
		recs = append(recs, r)
		ttft = append(ttft, float64(r.FirstTokenNs-r.SentNs)/1e6)
		e2el = append(e2el, float64(r.LastTokenNs-r.SentNs)/1e6)
	}
	recs = append(recs, Record{ID: 99, Phase: "measure", SentNs: 5000 * ms, DoneNs: 5001 * ms, Status: "error", ErrorClass: "http_5xx", OutputTokens: 0})
	in := RunInput{Cell: "c", Records: recs, Start: t0, WindowStart: t0.Add(1000 * 1e6), WindowEnd: t0.Add(3000 * 1e6), Offered: 6,
		Percentiles: []float64{50, 90, 99.9}, NaturalLength: true, Label: "run-a", Metadata: map[string]string{"tp": "1"}}
	s, err := SummarizeRun(in)
	if err != nil {
		t.Fatal(err)
	}
	near := func(a *float64, b float64) bool { return a != nil && math.Abs(*a-b) < 1e-9 }
	if !near(s.P95TTFTMs, linearPercentile(ttft, 95)) || !near(s.P95E2ELMs, linearPercentile(e2el, 95)) || s.P95ITLMs == nil || s.P95TPOTMs == nil {
		t.Errorf("p95: ttft %v e2el %v, want %v %v", deref(s.P95TTFTMs), deref(s.P95E2ELMs), linearPercentile(ttft, 95), linearPercentile(e2el, 95))
	}
	if got, ok := s.Percentiles["p99.9_ttft_ms"]; !ok || math.Abs(got-linearPercentile(ttft, 99.9)) > 1e-9 {
		t.Errorf("p99.9_ttft_ms %v (present %v), want %v", got, ok, linearPercentile(ttft, 99.9))
	}
	if _, ok := s.Percentiles["p50_ttft_ms"]; ok || len(s.Percentiles) != 4 {
		t.Errorf("percentiles %v: want only p99.9 of the four metrics (p50/p90 have their own fields)", s.Percentiles)
	}
	if v, ok := RunMetric(s, "ttft_p99.9"); !ok || v != s.Percentiles["p99.9_ttft_ms"] {
		t.Errorf("ttft_p99.9 not a run metric: %v %v", v, ok)
	}
	if v, ok := RunMetric(s, "e2el_p95"); !ok || v != *s.P95E2ELMs {
		t.Errorf("e2el_p95 not a run metric")
	}
	var fl []float64
	for _, n := range lens {
		fl = append(fl, float64(n))
	}
	ol := s.OutputLengths
	if ol == nil || ol.N != len(lens) || ol.Min != 2 || ol.Max != 12 || !near(ol.Median, linearPercentile(fl, 50)) || !near(ol.P90, linearPercentile(fl, 90)) {
		t.Errorf("output lengths %+v", ol)
	}
	if !s.NaturalLength || s.Label != "run-a" || s.Metadata["tp"] != "1" {
		t.Errorf("natural %v label %q metadata %v", s.NaturalLength, s.Label, s.Metadata)
	}
	for _, bad := range []string{"0", "100", "95,95", "x", "50,,90"} {
		if _, err := ParsePercentiles(bad); err == nil {
			t.Errorf("percentiles %q: want an error", bad)
		}
	}
	if ps, err := ParsePercentiles(" 99.9, 50 ,95"); err != nil || len(ps) != 3 || ps[0] != 50 || ps[2] != 99.9 || !strings.HasPrefix(PercentileKey(ps[2], "itl"), "p99.9_itl") {
		t.Errorf("ParsePercentiles: %v %v", ps, err)
	}
}
