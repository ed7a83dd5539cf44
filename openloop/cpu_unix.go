//go:build unix

package openloop

import "syscall"

// cpuSeconds returns the user+system CPU time of this process so far.
//
// getrusage(2) rather than gopsutil: gopsutil/v4/process needs modules that
// go.sum does not hold (github.com/tklauser/go-sysconf); both read the same
// kernel counters for this process.
func cpuSeconds() (float64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime), nil
}
