// Package cpupin pins processes to sets of CPUs and reads a process's set,
// for benchmarks and sweeps that keep a load generator and the server it
// drives on cores of their own (or on the same ones, to measure what
// sharing costs).
package cpupin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Parse reads a CPU list as taskset and /sys write them: "0,1", "2-5",
// "0,4-7". It returns the CPUs in the order given, without repeats.
func Parse(list string) ([]int, error) {
	var cpus []int
	seen := map[int]bool{}
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("cpu list %q: empty entry", list)
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: %q is not a CPU number", list, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", list, part)
			}
		}
		for c := a; c <= b; c++ {
			if !seen[c] {
				seen[c] = true
				cpus = append(cpus, c)
			}
		}
	}
	return cpus, nil
}

// Format writes cpus as a list Parse reads ("0,1,4").
func Format(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// Without is cpus less those in drop, in cpus' order.
func Without(cpus, drop []int) []int {
	return slices.DeleteFunc(slices.Clone(cpus), func(c int) bool { return slices.Contains(drop, c) })
}
