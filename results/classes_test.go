package results

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/probes"
)

// TestSummarizeClasses: requests land in the class of their figure under
// the basis (given per id, else the prompt), each class's TTFT quantiles are
// those of its own completed requests, computed here by sorting, and its
// failures are counted in it, by error class.
func TestSummarizeClasses(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var recs []Record
	newTok := map[int]int{}
	want := map[int][]float64{}
	wantFailed := map[int]int{}
	for i := range 400 {
		in := 100 + r.IntN(90000)
		ttftMs := 1 + r.Float64()*100
		rec := Record{ID: i, Phase: openloop.PhaseMeasure, Status: openloop.StatusOK, InputTokens: in, OutputTokens: 5,
			SentNs: 1e9, FirstTokenNs: 1e9 + int64(ttftMs*1e6), LastTokenNs: 1e9 + int64(ttftMs*1e6) + 4e6}
		cls := in
		if i%2 == 0 { // half have a router estimate: a cached prefix
			cls = in / 3
			newTok[i] = cls
		}
		c := 3
		switch {
		case cls < 5000:
			c = 0
		case cls < 20000:
			c = 1
		case cls < 50000:
			c = 2
		}
		if i%10 == 9 {
			rec.Status, rec.ErrorClass = "error", openloop.ErrClassTimeout // failed: counted in its class, not in its latency
			wantFailed[c]++
		} else {
			want[c] = append(want[c], float64(rec.FirstTokenNs-rec.SentNs)/1e6)
		}
		recs = append(recs, rec)
	}
	cs := SummarizeClasses(recs, ClassByIdealNewTokens, newTok, [3]int{})
	if cs.Basis != ClassByIdealNewTokens || cs.DependsOnRouting || cs.Fallback != 200 || cs.Bounds != DefaultClassBounds || len(cs.Classes) != 4 {
		t.Fatalf("summary %+v", cs)
	}
	total, ids := 0, 0
	for c, st := range cs.Classes {
		total += st.Completed
		ids += len(st.IDs)
		xs := want[c]
		if st.Completed != len(xs) || st.Failed != wantFailed[c] || st.Requests != len(xs)+wantFailed[c] ||
			st.Failed > 0 && st.FailedBy[string(openloop.ErrClassTimeout)] != st.Failed {
			t.Fatalf("%s: %+v, want %d completed, %d failed", st.Class, st, len(xs), wantFailed[c])
		}
		sort.Float64s(xs)
		// Linear interpolation between closest ranks.
		q := func(p float64) float64 {
			h := p / 100 * float64(len(xs)-1)
			lo := math.Floor(h)
			return xs[int(lo)] + (h-lo)*(xs[min(int(lo)+1, len(xs)-1)]-xs[int(lo)])
		}
		if math.Abs(*st.MedianTTFTMs-q(50)) > 1e-9 || math.Abs(*st.P90TTFTMs-q(90)) > 1e-9 {
			t.Errorf("%s: TTFT p50/p90 %v/%v, want %v/%v", st.Class, *st.MedianTTFTMs, *st.P90TTFTMs, q(50), q(90))
		}
		if st.P90TPOTMs == nil || math.Abs(*st.P90TPOTMs-1) > 1e-9 {
			t.Errorf("%s: TPOT p90 %v, want 1 ms (4 ms over 4 tokens)", st.Class, st.P90TPOTMs)
		}
	}
	if total != 360 || ids != 400 {
		t.Errorf("%d requests completed in classes, %d ids: want the 360 completed of 400", total, ids)
	}
	if got := SummarizeClasses(recs, ClassByInputTokens, nil, [3]int{10, 20, 30}); got.Basis != ClassByInputTokens || got.Fallback != 0 || got.Classes[3].Completed != 360 {
		t.Errorf("by input with tiny bounds: %+v", got.Classes)
	}
	if got := SummarizeClasses(recs, ClassByRouterNewTokens, newTok, [3]int{}); !got.DependsOnRouting {
		t.Error("router-estimated classes not marked as depending on routing")
	}
	m := RunMetrics(&RunSummary{Classes: cs})
	if v, ok := m["class_heavy_plus_p90_ttft_ms"]; !ok || v != *cs.Classes[3].P90TTFTMs {
		t.Errorf("flattened HEAVY+ TTFT p90: %v %v", v, ok)
	}
}

// TestSummarizeInstances: per-target hit rates from /metrics deltas and
// their spread, against figures worked out by hand: instance A 30 of 100
// tokens, B 90 of 100, C no queries (no rate, left out of the spread).
func TestSummarizeInstances(t *testing.T) {
	sc := func(target string, q, h, eq, eh float64) probes.Scrape {
		return probes.Scrape{Target: target, Values: map[string]float64{
			"vllm:prefix_cache_queries_total": q, "vllm:prefix_cache_hits_total": h,
			"vllm:external_prefix_cache_queries_total": eq, "vllm:external_prefix_cache_hits_total": eh}}
	}
	before := []probes.Scrape{sc("A", 1000, 10, 0, 0), sc("B", 50, 5, 0, 0), sc("C", 7, 7, 0, 0)}
	after := []probes.Scrape{sc("A", 1100, 40, 100, 50), sc("B", 150, 95, 100, 10), sc("C", 7, 7, 0, 0)}
	ic := SummarizeInstances(probes.VLLMMetrics, before, after)
	if len(ic.Instances) != 3 || ic.Instances[2].HitRate != nil {
		t.Fatalf("instances %+v", ic.Instances)
	}
	near := func(name string, got *float64, want float64) {
		if got == nil || math.Abs(*got-want) > 1e-12 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("A", ic.Instances[0].HitRate, 0.3)
	near("B", ic.Instances[1].HitRate, 0.9)
	near("mean", ic.HitRateMean, 0.6)
	near("std", ic.HitRateStd, 0.3) // population std of {0.3, 0.9}
	near("min", ic.HitRateMin, 0.3)
	near("max", ic.HitRateMax, 0.9)
	near("external mean", ic.ExternalHitRateMean, 0.3) // {0.5, 0.1}
	near("external std", ic.ExternalHitRateStd, 0.2)
	if SummarizeInstances(probes.VLLMMetrics, nil, nil) != nil {
		t.Error("no scrapes gave a summary")
	}
}
