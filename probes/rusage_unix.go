//go:build unix

package probes

import (
	"syscall"
	"time"
)

// ProcessCPU returns the CPU time (user + system) this process has used,
// to report what the probe itself costs.
func ProcessCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
