//go:build !unix

package openloop

import "errors"

// cpuSeconds is not available on this platform; ClientCPUPct stays 0.
func cpuSeconds() (float64, error) { return 0, errors.New("process CPU time not available") }
