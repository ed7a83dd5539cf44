package openloop

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"
)

// TestSchedulePinned pins the send offsets of every arrival process, with
// and without a ramp, for a fixed seed: a refactor of the schedule must
// leave them byte-identical (a run's send times are a pure function of
// arrival, rate and seed, and recorded runs are compared across versions).
// 3000 offsets cross the schedule's chunk boundaries twice; gamma is pinned
// below and above shape 1, the two branches of its sampler.
func TestSchedulePinned(t *testing.T) {
	lin := &Ramp{Kind: RampLinear, From: 0, Duration: 2 * time.Second}
	exp := &Ramp{Kind: RampExponential, From: 5, Duration: 3 * time.Second}
	for _, tc := range []struct {
		name string
		a    Arrival
		rate float64
		want string
	}{
		{"poisson", Arrival{}, 250, "01e2a3e6b2dbf07d"},
		{"poisson named", Arrival{Process: ArrivalPoisson}, 37.5, "876237e447efa6c1"},
		{"gamma 0.5", Arrival{Process: ArrivalGamma, Burstiness: 0.5}, 120, "c7491b88d5e208f2"},
		{"gamma 2.5", Arrival{Process: ArrivalGamma, Burstiness: 2.5}, 120, "1972abc775d54189"},
		{"constant", Arrival{Process: ArrivalConstant}, 333, "766d8a11701078e7"},
		{"burst", Arrival{Process: ArrivalGamma, Burstiness: 1}, math.Inf(1), "151ff79f29e96d21"},
		{"poisson linear ramp", Arrival{Ramp: lin}, 400, "350877db49a18244"},
		{"gamma exponential ramp", Arrival{Process: ArrivalGamma, Burstiness: 0.7, Ramp: exp}, 90, "fd3f9d22268ec889"},
		{"constant linear ramp", Arrival{Process: ArrivalConstant, Ramp: lin}, 50, "ba7f9ac7a9e5dbe3"},
		{"burst ramp", Arrival{Ramp: lin}, math.Inf(1), "151ff79f29e96d21"},
	} {
		offs, err := Offsets(tc.a, tc.rate, 20261206, 3000)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		h := sha256.New()
		for _, o := range offs {
			h.Write(binary.LittleEndian.AppendUint64(nil, uint64(o)))
		}
		got := fmt.Sprintf("%x", h.Sum(nil))[:16]
		if got != tc.want {
			t.Errorf("%s: offsets hash %s, want %s (offsets %v … %v)", tc.name, got, tc.want, offs[:3], offs[len(offs)-1])
		}
	}
}
