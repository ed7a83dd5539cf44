//go:build !linux

package cpupin

import "errors"

var errLinux = errors.New("pinning to CPUs needs Linux")

// Self is not available on this platform.
func Self([]int) error { return errLinux }

// Processes is not available on this platform.
func Processes(_, _ []int) error { return errLinux }

// Allowed is not available on this platform.
func Allowed(int) ([]int, error) { return nil, errLinux }
