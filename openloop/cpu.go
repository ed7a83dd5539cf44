package openloop

import (
	"os"
	"sync"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/process"
)

// selfProcess is this process, as gopsutil reads it.
var selfProcess = sync.OnceValues(func() (*process.Process, error) { return process.NewProcess(int32(os.Getpid())) })

// cpuSeconds returns the user+system CPU time of this process so far, from
// gopsutil (the client CPU that every run reports to grade itself).
func cpuSeconds() (float64, error) {
	self, err := selfProcess()
	if err != nil {
		return 0, err
	}
	t, err := self.Times()
	if err != nil {
		return 0, err
	}
	return t.User + t.System, nil
}

// hostTimes is the machine's CPU time so far, summed over its cores: busy
// (user, nice, system, irq, softirq) and stolen by the hypervisor, in
// seconds, with the number of cores; ok false where the OS does not say.
type hostTimes struct {
	busy, steal float64
	cores       int
	ok          bool
}

func readHostTimes() hostTimes {
	ts, err := cpu.Times(false)
	n, err2 := cpu.Counts(true)
	if err != nil || err2 != nil || len(ts) == 0 || n <= 0 {
		return hostTimes{}
	}
	t := ts[0]
	return hostTimes{busy: t.User + t.Nice + t.System + t.Irq + t.Softirq, steal: t.Steal, cores: n, ok: true}
}

// hostShare is the machine's busy and stolen CPU between a and b, over wall
// seconds, each as a percentage of all its cores; ok false when unknown.
func hostShare(a, b hostTimes, wall float64) (busyPct, stealPct float64, ok bool) {
	if !a.ok || !b.ok || !(wall > 0) {
		return 0, 0, false
	}
	capacity := wall * float64(b.cores)
	return 100 * (b.busy - a.busy) / capacity, 100 * (b.steal - a.steal) / capacity, true
}
