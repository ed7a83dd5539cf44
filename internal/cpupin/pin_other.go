//go:build !linux

package cpupin

import "errors"

// Self is not available on this platform.
func Self([]int) error { return errors.New("pinning to CPUs needs Linux") }
