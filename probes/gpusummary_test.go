package probes

import (
	"strings"
	"testing"
)

func TestSummarizeGPU(t *testing.T) {
	s := func(gpu int, tsS float64, util, mem, power float64) GPUSample {
		return GPUSample{TsUs: int64(tsS * 1e6), Host: "h", GPU: gpu, UUID: "GPU-x", UtilGPU: util,
			MemUsedMiB: mem, PowerW: power, TempC: 40, SMClockMHz: 1980, ThrottleReasons: 1 << uint(gpu)}
	}
	// Out of order on purpose: the summary sorts by time.
	samples := []GPUSample{
		s(1, 0, 80, 1000, 400), s(0, 3, 30, 3000, 300), s(0, 0, 10, 1000, 100),
		s(0, 1, 20, 2000, 200), s(1, 2, 80, 1000, 400),
	}
	sum := SummarizeGPU(samples)
	if !sum.Available || len(sum.PerGPU) != 2 {
		t.Fatalf("%+v", sum)
	}
	g0, g1 := sum.PerGPU[0], sum.PerGPU[1]
	// Trapezoids: 0–1 s at (100+200)/2 W, 1–3 s at (200+300)/2 W = 150 + 500 J.
	if g0.EnergyJ != 650 || g1.EnergyJ != 800 {
		t.Errorf("energy %v %v, want 650 and 800", g0.EnergyJ, g1.EnergyJ)
	}
	if g0.UtilGPU != (Stat{Mean: 20, Min: 10, Max: 30}) || g0.MemUsed != (Stat{Mean: 2000, Min: 1000, Max: 3000}) ||
		g0.PowerW != (Stat{Mean: 200, Min: 100, Max: 300}) || g0.N != 3 || g0.DurationS != 3 {
		t.Errorf("gpu0 %+v", g0)
	}
	if sum.Imbalance != 4 || g0.ThrottleReasons != 1 || g1.ThrottleReasons != 2 { // 80 / 20
		t.Errorf("imbalance %v, throttle %b %b", sum.Imbalance, g0.ThrottleReasons, g1.ThrottleReasons)
	}
	// One idle GPU makes max/min undefined; all idle is balanced.
	if z := SummarizeGPU([]GPUSample{s(0, 0, 0, 0, 0), s(1, 0, 50, 0, 0)}); z.Imbalance != 0 || z.ImbalanceNote == "" {
		t.Errorf("%+v", z)
	}
	if z := SummarizeGPU([]GPUSample{s(0, 0, 0, 0, 0)}); z.Imbalance != 1 {
		t.Errorf("%+v", z)
	}
	if none := SummarizeGPU(nil); none.Available || none.Reason == "" {
		t.Errorf("%+v", none)
	}
}

func TestReadProbeStream(t *testing.T) {
	in := `{"ts_us":1,"host":"h","gpu":0,"uuid":"GPU-a","util_gpu":5}
{"ts_us":2,"host":"h","cpu_pct":12.5,"mem_used_mib":100,"mem_total_mib":200,"load1":0.5}

{"ts_us":3,"host":"h","gpu":1,"uuid":"GPU-b","util_gpu":7,"future_field":1}
`
	g, h, err := ReadProbeStream(strings.NewReader(in))
	if err != nil || len(g) != 2 || len(h) != 1 || g[1].UtilGPU != 7 || h[0].CPUPct != 12.5 {
		t.Fatalf("%+v %+v %v", g, h, err)
	}
	if got := SliceGPUSamples(g, 2, 0); len(got) != 1 || got[0].GPU != 1 {
		t.Errorf("slice %+v", got)
	}
	for _, bad := range []string{"{\"gpu\":0}\n{oops\n", "{\"x\":1}\n"} {
		if _, err := ReadGPUSamples(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
