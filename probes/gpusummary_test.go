package probes

import (
	"reflect"
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

// TestSummarizeGPUH200 is a regression test on real samples: every third
// line of `mbench probe --interval 250ms` on an H200 while a bf16 matmul
// loop ran from LoadStart to LoadEnd (µs). Expected figures were computed
// independently (Python) from the same file.
func TestSummarizeGPUH200(t *testing.T) {
	const loadStart, loadEnd = 1796005549762197, 1796005559794552
	f := strings.NewReader(readTestdata(t, "h200_probe_excerpt.jsonl"))
	samples, err := ReadGPUSamples(f)
	if err != nil || len(samples) != 38 {
		t.Fatalf("%d samples, %v", len(samples), err)
	}
	sum := SummarizeGPU(samples)
	if !sum.Available || len(sum.PerGPU) != 1 || sum.Imbalance != 1 {
		t.Fatalf("%+v", sum)
	}
	g := sum.PerGPU[0]
	if g.Name != "NVIDIA H200" || g.N != 38 || !closeTo(g.DurationS, 27.750059, 1e-9) {
		t.Errorf("%+v", g)
	}
	if !closeTo(g.EnergyJ, 8362.8757591155, 1e-9) || !closeTo(g.UtilGPU.Mean, 33.86842105263158, 1e-12) ||
		!closeTo(g.PowerW.Mean, 295.4987894736842, 1e-12) || g.PowerW.Max != 695.493 || g.PowerW.Min != 78.052 ||
		g.MemUsed.Max != 1625.875 || g.MemUsed.Min != 615.0625 || g.ThrottleReasons != 5 || g.TempC.Max != 58 {
		t.Errorf("summary %+v", g)
	}
	// Taken with the v1 memory call (before the v2 one was used): idle
	// 615 MiB is the driver's reserved memory, nvidia-smi's 0 MiB.
	if g.MemSource != MemFromV1 || g.MemReserved != nil {
		t.Errorf("memory from %q reserved %+v; want %q, none", g.MemSource, g.MemReserved, MemFromV1)
	}
	for _, ph := range []struct {
		name         string
		from, to     int64
		n            int
		util, powerW float64
	}{
		{"before", 0, loadStart - 1, 16, 0, 78.459375},
		{"during", loadStart, loadEnd, 13, 99, 670.6391538461539},
		{"after", loadEnd + 1, 0, 9, 0, 139.47722222222222},
	} {
		s := SummarizeGPU(SliceGPUSamples(samples, ph.from, ph.to)).PerGPU[0]
		if s.N != ph.n || !closeTo(s.UtilGPU.Mean, ph.util, 1e-12) || !closeTo(s.PowerW.Mean, ph.powerW, 1e-12) {
			t.Errorf("%s: n %d util %v power %v", ph.name, s.N, s.UtilGPU.Mean, s.PowerW.Mean)
		}
	}
}

func TestSortedGPUKeys(t *testing.T) {
	m := map[GPUKey]int{{"b", 0}: 0, {"a", 10}: 0, {"a", 2}: 0, {"b", -1}: 0}
	got := SortedGPUKeys(m)
	want := []GPUKey{{"a", 2}, {"a", 10}, {"b", -1}, {"b", 0}}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%v, want %v", got, want)
		}
	}
}

// TestEnergySource: the counter's rise when the window's first and last
// samples carry it; power integration, marked, when one lacks it or the
// counter went back (the driver reloaded).
func TestEnergySource(t *testing.T) {
	mj := func(v uint64) *uint64 { return &v }
	for _, c := range []struct {
		name   string
		e0, e1 *uint64
		want   float64
		source string
	}{
		{"counter", mj(1_000_000), mj(1_450_000), 450, EnergyFromCounter},
		{"no counter", nil, nil, 300, EnergyFromPower},
		{"counter missing at the end", mj(5), nil, 300, EnergyFromPower},
		{"counter went back", mj(9_000_000), mj(1_000), 300, EnergyFromPower},
	} {
		ss := []GPUSample{{TsUs: 0, PowerW: 100, EnergyMJ: c.e0}, {TsUs: 1_000_000, PowerW: 200}, {TsUs: 2_000_000, PowerW: 100, EnergyMJ: c.e1}}
		g := SummarizeGPU(ss).PerGPU[0]
		if g.EnergyJ != c.want || g.EnergySource != c.source || g.EnergyIntegratedJ != 300 {
			t.Errorf("%s: %v J from %s (integrated %v), want %v from %s", c.name, g.EnergyJ, g.EnergySource, g.EnergyIntegratedJ, c.want, c.source)
		}
	}
}

// TestMemSource: v2 when every sample that read memory carries the reserved
// amount (a sample whose memory read failed does not count), v1 when none
// does, mixed when a GPU's samples have both; the reserved Stat is over the
// samples that carry it.
func TestMemSource(t *testing.T) {
	r := func(v float64) *float64 { return &v }
	v2 := func(used, res float64) GPUSample {
		return GPUSample{MemUsedMiB: used, MemReservedMiB: r(res), MemTotalMiB: 143771}
	}
	v1 := GPUSample{MemUsedMiB: 1818, MemTotalMiB: 143771}
	failed := GPUSample{Err: "memory: ERROR_UNKNOWN"}
	for _, c := range []struct {
		name   string
		ss     []GPUSample
		source string
		res    *Stat
	}{
		{"v2", []GPUSample{v2(1203, 614), v2(1451, 616)}, MemFromV2, &Stat{Mean: 615, Min: 614, Max: 616}},
		{"v2 with a failed read", []GPUSample{v2(1203, 614), failed, v2(1203, 614)}, MemFromV2, &Stat{Mean: 614, Min: 614, Max: 614}},
		{"v1", []GPUSample{v1, v1}, MemFromV1, nil},
		{"mixed", []GPUSample{v2(1203, 614), v1}, MemFromMixed, nil},
		{"no memory read", []GPUSample{failed}, "", nil},
	} {
		g := SummarizeGPU(c.ss).PerGPU[0]
		if g.MemSource != c.source || !reflect.DeepEqual(g.MemReserved, c.res) {
			t.Errorf("%s: memory from %q reserved %+v; want %q, %+v", c.name, g.MemSource, g.MemReserved, c.source, c.res)
		}
	}
}

// SliceGPUSamples keeps the samples with fromUs ≤ ts_us ≤ toUs (0 leaves a
// side unbounded), to cut a run's window out of a longer probe stream.
func SliceGPUSamples(samples []GPUSample, fromUs, toUs int64) []GPUSample {
	var out []GPUSample
	for _, s := range samples {
		if (fromUs == 0 || s.TsUs >= fromUs) && (toUs == 0 || s.TsUs <= toUs) {
			out = append(out, s)
		}
	}
	return out
}
