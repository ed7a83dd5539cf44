//go:build linux

package cpupin

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Self pins every thread of this process to cpus; threads started later
// inherit the set from the thread that starts them, all of which are
// pinned. It goes over the threads twice, for one started meanwhile.
func Self(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	for range 2 {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("pin to CPUs %s: %w", Format(cpus), err)
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("pin to CPUs %s: %w", Format(cpus), err)
			}
		}
	}
	return nil
}
