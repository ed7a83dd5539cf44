//go:build linux

package cpupin

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Self pins every thread of this process to cpus; threads started later
// inherit the set from the thread that starts them, all of which are
// pinned. It goes over the threads twice, for one started meanwhile.
func Self(cpus []int) error {
	if err := pinTasks("self", cpus); err != nil {
		return fmt.Errorf("pin to CPUs %s: %w", Format(cpus), err)
	}
	return nil
}

// Processes pins every thread of each of pids to cpus, as Self does; a
// process that has exited meanwhile is left out.
func Processes(pids, cpus []int) error {
	for _, pid := range pids {
		err := pinTasks(strconv.Itoa(pid), cpus)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pin process %d to CPUs %s: %w", pid, Format(cpus), err)
		}
	}
	return nil
}

// pinTasks pins the threads of /proc/<proc>/task, twice over.
func pinTasks(proc string, cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	for range 2 {
		ents, err := os.ReadDir("/proc/" + proc + "/task")
		if err != nil {
			return err
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return err
			}
		}
	}
	return nil
}

// Allowed is the set of CPUs process pid (0: this thread) may run on,
// ascending.
func Allowed(pid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return nil, fmt.Errorf("CPUs of process %d: %w", pid, err)
	}
	var out []int
	for c := range 8 * 1024 {
		if set.Count() == len(out) {
			break
		}
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out, nil
}
