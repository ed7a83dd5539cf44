package probes

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ThrottleFractions is, per NVML clocks-throttle reason, the fraction of a
// run's window the reason was active. Each interval between two samples
// counts with the state of its first sample (the state seen holds until the
// next reading); with a single sample, or samples all at one instant, the
// fraction is the share of samples.
type ThrottleFractions struct {
	GPUIdle       float64 `json:"gpu_idle"`
	AppClocks     float64 `json:"applications_clocks_setting"`
	SWPowerCap    float64 `json:"sw_power_cap"`
	HWSlowdown    float64 `json:"hw_slowdown"`
	SyncBoost     float64 `json:"sync_boost"`
	SWThermal     float64 `json:"sw_thermal_slowdown"`
	HWThermal     float64 `json:"hw_thermal_slowdown"`
	HWPowerBrake  float64 `json:"hw_power_brake_slowdown"`
	DisplayClocks float64 `json:"display_clock_setting"`
	// ThermalOrPower is the fraction under any power or thermal reason
	// (sw_power_cap, hw_slowdown, sw/hw thermal, hw power brake): what the
	// throttle bound is compared with.
	ThermalOrPower float64 `json:"thermal_or_power"`
	// ClockLoss is what those reasons cost: the share of the GPU's
	// unthrottled SM clock (UnthrottledClockMHz, the highest SM clock of a
	// sample under none of them) the window lost while one held, the
	// time-weighted mean of 1 − clock/unthrottled (0 while none held).
	// Absent when no power or thermal reason held, or when every sample had
	// one (nothing to measure the clock against).
	ClockLoss           *float64 `json:"clock_loss,omitempty"`
	UnthrottledClockMHz float64  `json:"unthrottled_sm_clock_mhz,omitempty"`
}

// throttleReason is one bit of the NVML bitmask.
type throttleReason struct {
	bit          uint64
	name         string
	field        func(*ThrottleFractions) *float64
	thermalPower bool
}

var throttleReasons = []throttleReason{
	{nvml.ClocksThrottleReasonGpuIdle, "gpu_idle", func(t *ThrottleFractions) *float64 { return &t.GPUIdle }, false},
	{nvml.ClocksThrottleReasonApplicationsClocksSetting, "applications_clocks_setting", func(t *ThrottleFractions) *float64 { return &t.AppClocks }, false},
	{nvml.ClocksThrottleReasonSwPowerCap, "sw_power_cap", func(t *ThrottleFractions) *float64 { return &t.SWPowerCap }, true},
	{nvml.ClocksThrottleReasonHwSlowdown, "hw_slowdown", func(t *ThrottleFractions) *float64 { return &t.HWSlowdown }, true},
	{nvml.ClocksThrottleReasonSyncBoost, "sync_boost", func(t *ThrottleFractions) *float64 { return &t.SyncBoost }, false},
	{nvml.ClocksThrottleReasonSwThermalSlowdown, "sw_thermal_slowdown", func(t *ThrottleFractions) *float64 { return &t.SWThermal }, true},
	{nvml.ClocksThrottleReasonHwThermalSlowdown, "hw_thermal_slowdown", func(t *ThrottleFractions) *float64 { return &t.HWThermal }, true},
	{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown", func(t *ThrottleFractions) *float64 { return &t.HWPowerBrake }, true},
	{nvml.ClocksThrottleReasonDisplayClockSetting, "display_clock_setting", func(t *ThrottleFractions) *float64 { return &t.DisplayClocks }, false},
}

// thermalPowerMask is the union of the power and thermal reasons.
var thermalPowerMask = func() uint64 {
	var m uint64
	for _, r := range throttleReasons {
		if r.thermalPower {
			m |= r.bit
		}
	}
	return m
}()

// throttleFractions computes the fractions over samples sorted by time.
func throttleFractions(ss []GPUSample) ThrottleFractions {
	var t ThrottleFractions
	weight := func(i int) float64 { // the time sample i's state holds
		return float64(ss[i+1].TsUs - ss[i].TsUs)
	}
	total, n := 0.0, len(ss)-1
	for i := range n {
		total += weight(i)
	}
	if total <= 0 { // one instant: share of samples
		weight, n, total = func(int) float64 { return 1 }, len(ss), float64(len(ss))
	}
	frac := func(mask uint64) float64 {
		on := 0.0
		for i := range n {
			if ss[i].ThrottleReasons&mask != 0 {
				on += weight(i)
			}
		}
		return on / total
	}
	for _, r := range throttleReasons {
		*r.field(&t) = frac(r.bit)
	}
	t.ThermalOrPower = frac(thermalPowerMask)
	if t.ThermalOrPower > 0 {
		for _, x := range ss {
			if x.ThrottleReasons&thermalPowerMask == 0 {
				t.UnthrottledClockMHz = max(t.UnthrottledClockMHz, x.SMClockMHz)
			}
		}
	}
	if ref := t.UnthrottledClockMHz; ref > 0 {
		lost := 0.0
		for i := range n {
			if ss[i].ThrottleReasons&thermalPowerMask != 0 {
				lost += weight(i) * max(0, 1-ss[i].SMClockMHz/ref)
			}
		}
		t.ClockLoss = new(lost / total)
	}
	return t
}

// costly reports whether the power and thermal reasons cost the GPU more
// than ThrottleMinClockLoss of its clock, in words: a reason that held
// while the SM clock stayed at its unthrottled speed (an H100's
// sw_power_cap at a third of its power limit took 1% of its clock in 40%
// of a vLLM run's window) does not change what the run measured. Unknown
// (no unthrottled sample) counts as costly.
func (t ThrottleFractions) costly() (bool, string) {
	if t.ClockLoss == nil {
		return true, "no unthrottled sample to measure its cost in SM clock"
	}
	return *t.ClockLoss > ThrottleMinClockLoss, fmt.Sprintf("costing %.1f%% of the unthrottled %.0f MHz SM clock over the window",
		100**t.ClockLoss, t.UnthrottledClockMHz)
}

// ThrottleMinClockLoss is the share of its SM clock a GPU must lose to
// power or thermal throttling over a run's window (ThrottleFractions.
// ClockLoss) before the run is marked throttled.
const ThrottleMinClockLoss = 0.01

// active lists the power and thermal reasons with their fractions, for a
// reason string: "sw_power_cap 40%, hw_thermal_slowdown 5%".
func (t ThrottleFractions) active() string {
	var parts []string
	for _, r := range throttleReasons {
		if f := *r.field(&t); r.thermalPower && f > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", r.name, 100*f))
		}
	}
	return strings.Join(parts, ", ")
}

// procsSeen gathers the processes listed in samples sorted by time, split
// by owner, each in order of first appearance.
func procsSeen(ss []GPUSample, o Owner) (own, foreign []ProcSeen) {
	type entry struct {
		seen ProcSeen
		own  bool
	}
	var order []int
	by := map[int]*entry{}
	for _, s := range ss {
		for _, p := range s.Procs {
			e, ok := by[p.Pid]
			if !ok {
				e = &entry{seen: ProcSeen{Pid: p.Pid, FirstTsUs: s.TsUs}}
				by[p.Pid] = e
				order = append(order, p.Pid)
			}
			e.seen.Samples++
			e.seen.LastTsUs = s.TsUs
			e.seen.MaxUsedMiB = max(e.seen.MaxUsedMiB, p.UsedMiB)
			if p.Visible() {
				e.seen.Name, e.seen.Pgid, e.seen.Sid = p.Name, p.Pgid, p.Sid
			}
			// Owned once seen owned: a worker whose group lookup raced its
			// exit is still the engine's.
			e.own = e.own || (o != nil && o.Owns(s.Host, p))
		}
	}
	for _, pid := range order {
		if e := by[pid]; e.own {
			own = append(own, e.seen)
		} else {
			foreign = append(foreign, e.seen)
		}
	}
	return own, foreign
}

// hardwareEvents collects the events of samples sorted by time and the rise
// of the ECC counters between the first and the last sample that has them.
func hardwareEvents(ss []GPUSample) (events []GPUEvent, corrected, uncorrected uint64) {
	var first, last *GPUSample
	for i := range ss {
		events = append(events, ss[i].Events...)
		if ss[i].ECCCorrected != nil && ss[i].ECCUncorrected != nil {
			first, last = cmp.Or(first, &ss[i]), &ss[i]
		}
	}
	if first != nil {
		corrected = rise(*first.ECCCorrected, *last.ECCCorrected)
		uncorrected = rise(*first.ECCUncorrected, *last.ECCUncorrected)
	}
	slices.SortStableFunc(events, func(a, b GPUEvent) int { return cmp.Compare(a.TsUs, b.TsUs) })
	return events, corrected, uncorrected
}

// rise is b − a, or 0 when the counter went down (a driver reload resets it).
func rise(a, b uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}
