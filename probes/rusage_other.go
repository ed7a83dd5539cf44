//go:build !unix

package probes

import (
	"errors"
	"time"
)

// ProcessCPU is not available on this platform.
func ProcessCPU() (time.Duration, error) {
	return 0, errors.New("process CPU time: not supported on this platform")
}
