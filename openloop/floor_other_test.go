//go:build !linux

package openloop

import (
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// streamedIOs are BenchmarkStreamedRequestCPU's sub-benchmarks; the floor
// client is Linux's (floor_linux_test.go).
var streamedIOs = []string{"reactor", "reactor-eachwake", "goroutines"}

func benchFloor(b *testing.B, _ *stub.Process, _ bool, _ float64, _ time.Duration, _ int) {
	b.Skip("the floor client is Linux's")
}
