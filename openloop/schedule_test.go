package openloop

import (
	"math"
	"testing"

	"github.com/mbench/mbench/stats"
)

// gapStats returns the mean rate (req/s) and the coefficient of variation of
// the gaps between offsets (ns), computed directly.
func gapStats(t *testing.T, offs []int64) (rate, cv float64) {
	t.Helper()
	n := len(offs) - 1
	var sum, sq float64
	for i := 1; i < len(offs); i++ {
		g := float64(offs[i]-offs[i-1]) / 1e9
		if g < 0 {
			t.Fatalf("offset %d goes backwards: %d after %d", i, offs[i], offs[i-1])
		}
		sum += g
		sq += g * g
	}
	mean := sum / float64(n)
	sd := math.Sqrt(sq/float64(n) - mean*mean)
	return 1 / mean, sd / mean
}

func TestPoissonSchedule(t *testing.T) {
	const rate = 250.0
	offs, err := Offsets(Arrival{}, rate, 20260526, 20001)
	if err != nil {
		t.Fatal(err)
	}
	if offs[0] != 0 {
		t.Errorf("first arrival at %d ns, want 0", offs[0])
	}
	got, cv := gapStats(t, offs)
	if math.Abs(got/rate-1) > 0.02 {
		t.Errorf("mean rate %.2f req/s, want %.0f within 2%%", got, rate)
	}
	if math.Abs(cv-1) > 0.03 {
		t.Errorf("CV of gaps %.4f, want 1 ± 0.03", cv)
	}
}

func TestGammaSchedule(t *testing.T) {
	for _, b := range []float64{0.25, 0.5, 1, 2, 4} {
		offs, err := Offsets(Arrival{Process: ArrivalGamma, Burstiness: b}, 100, 7, 50001)
		if err != nil {
			t.Fatal(err)
		}
		rate, cv := gapStats(t, offs)
		want := 1 / math.Sqrt(b)
		if math.Abs(cv/want-1) > 0.03 {
			t.Errorf("b=%v: CV %.4f, want 1/√b = %.4f within 3%%", b, cv, want)
		}
		if math.Abs(rate/100-1) > 0.02 {
			t.Errorf("b=%v: mean rate %.2f, want 100 within 2%%", b, rate)
		}
	}
}

func TestConstantSchedule(t *testing.T) {
	offs, err := Offsets(Arrival{Process: ArrivalConstant}, 3000, 1, 20001)
	if err != nil {
		t.Fatal(err)
	}
	rate, cv := gapStats(t, offs)
	if cv >= 0.01 {
		t.Errorf("CV %.5f, want < 0.01", cv)
	}
	if math.Abs(rate/3000-1) > 1e-6 {
		t.Errorf("rate %.4f, want 3000", rate)
	}
}

func TestScheduleDeterministic(t *testing.T) {
	a, _ := Offsets(Arrival{}, 50, 42, 5000)
	s, _ := NewSchedule(Arrival{}, 50, 42)
	for i := range a { // read lazily, across chunk boundaries
		if v := s.Next(); v != a[i] {
			t.Fatalf("offset %d: lazy %d, precomputed %d", i, v, a[i])
		}
	}
	b, _ := Offsets(Arrival{}, 50, 43, 5000)
	same := 0
	for i := 1; i < len(a); i++ {
		if a[i] == b[i] {
			same++
		}
	}
	if same > 10 {
		t.Errorf("seeds 42 and 43 share %d offsets", same)
	}
}

func TestScheduleErrors(t *testing.T) {
	for _, tc := range []struct {
		a    Arrival
		rate float64
		want string
	}{
		{Arrival{}, 0, "rate: must be > 0 req/s, got 0"},
		{Arrival{}, math.NaN(), "rate: must be > 0 req/s, got NaN"},
		{Arrival{Process: "weibull"}, 1, `arrival: process: "weibull" is not poisson, gamma, constant or concurrency`},
		{Arrival{Process: ArrivalGamma}, 1, "arrival: burstiness: must be > 0 for gamma, got 0"},
	} {
		_, err := NewSchedule(tc.a, tc.rate, 1)
		if err == nil || err.Error() != tc.want {
			t.Errorf("NewSchedule(%+v, %v) = %v, want %q", tc.a, tc.rate, err, tc.want)
		}
	}
	offs, err := Offsets(Arrival{}, math.Inf(1), 1, 10)
	if err != nil || offs[9] != 0 {
		t.Errorf("infinite rate: %v, %v; want all at 0", offs, err)
	}
}

func TestKSOnSchedules(t *testing.T) {
	offs, _ := Offsets(Arrival{}, 100, 3, 5001)
	gaps := make([]float64, len(offs)-1)
	for i := range gaps {
		gaps[i] = float64(offs[i+1]-offs[i]) / 1e9
	}
	cdf := gapCDF(Arrival{}, 100)
	if _, p := stats.KSTest(append([]float64(nil), gaps...), cdf); p < 0.01 {
		t.Errorf("Poisson gaps rejected as exponential: p=%.4f", p)
	}
	if _, p := stats.KSTest(append([]float64(nil), gaps...), gapCDF(Arrival{}, 120)); p > 1e-6 {
		t.Errorf("rate-100 gaps accepted as rate 120: p=%.4g", p)
	}
	b, _ := Offsets(Arrival{Process: ArrivalGamma, Burstiness: 0.5}, 100, 3, 5001)
	for i := range gaps {
		gaps[i] = float64(b[i+1]-b[i]) / 1e9
	}
	if _, p := stats.KSTest(gaps, cdf); p > 1e-6 {
		t.Errorf("gamma b=0.5 gaps accepted as exponential: p=%.4g", p)
	}
}

func TestKSGridIgnoresJitter(t *testing.T) {
	const rate = 4000.0
	offs, _ := Offsets(Arrival{}, rate, 9, 12001)
	// Jitter every send by up to 20 µs and stretch gaps below 30 µs, as a
	// real sender does; then stall once for 3 ms and fire the backlog at once.
	r := streamRNG(1, 99, 0)
	jit := make([]float64, len(offs))
	for i, o := range offs {
		jit[i] = float64(o)/1e9 + r.Float64()*20e-6
		if i > 0 && jit[i]-jit[i-1] < 30e-6 {
			jit[i] = jit[i-1] + 30e-6
		}
	}
	gaps := func(xs []float64) []float64 {
		g := make([]float64, len(xs)-1)
		for i := range g {
			g[i] = xs[i+1] - xs[i]
		}
		return g
	}
	cdf := gapCDF(Arrival{}, rate)
	if _, p := stats.KSTest(gaps(jit), cdf); p > 0.01 {
		t.Logf("continuous KS accepts the jittered sends (p=%.3g)", p)
	}
	if d, p := stats.KSTestGrid(gaps(jit), cdf, KSResolution.Seconds()); p < 0.05 {
		t.Errorf("grid KS rejects 20 µs jitter: D=%.4f p=%.3g", d, p)
	}
	stalled := append([]float64(nil), jit...)
	for s := 0; s < 6; s++ { // six 10 ms stalls, each releasing a burst
		at := 1000 + s*1500
		for i := at; i < len(stalled) && stalled[i] < stalled[at]+10e-3; i++ {
			stalled[i] = stalled[at] + 10e-3 + float64(i-at)*1e-6
		}
	}
	if d, p := stats.KSTestGrid(gaps(stalled), cdf, KSResolution.Seconds()); p > 0.01 {
		t.Errorf("grid KS accepts a sender that stalls and bursts: D=%.4f p=%.3g", d, p)
	}
	if _, p := stats.KSTestGrid(gaps(jit), gapCDF(Arrival{}, rate*1.1), KSResolution.Seconds()); p > 0.01 {
		t.Errorf("grid KS accepts a 10%% wrong rate: p=%.3g", p)
	}
}

// Offsets returns the first n send offsets of the schedule (ns).
func Offsets(a Arrival, rate float64, seed int64, n int) ([]int64, error) {
	s, err := NewSchedule(a, rate, seed)
	if err != nil {
		return nil, err
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = s.Next()
	}
	return out, nil
}
