//go:build linux

package cpupin

import (
	"testing"

	"golang.org/x/sys/unix"
)

// allowed is the calling thread's CPU set.
func allowed(t *testing.T) []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var out []int
	for c := range 1024 {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}
