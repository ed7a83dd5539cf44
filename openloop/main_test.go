package openloop

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// TestMain doubles as the child stub process of startStubProcess: with
// stub.OptionsEnv set, the test binary serves the stub instead of testing.
func TestMain(m *testing.M) {
	if os.Getenv(stub.OptionsEnv) != "" {
		if err := stub.ServeProcess(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startStubProcess runs the stub in a child process (this test binary).
func startStubProcess(tb testing.TB, o stub.Options) *stub.Process {
	tb.Helper()
	p, err := stub.StartProcess(context.Background(), []string{os.Args[0], "-test.run=^$"}, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// BenchmarkStreamedRequestCPU is the client's CPU per streamed request: the
// stub runs in a child process (16 tokens, one flush each, first after 20 ms,
// then every ms), the client sends 256-token prompts, Poisson at MBENCH_RATE
// (default 2000 req/s) for MBENCH_DURATION (default 3 s), and the process's
// CPU time, which is now the client's alone, is divided by the requests
// sent. Run it with -benchtime=1x -count=N.
func BenchmarkStreamedRequestCPU(b *testing.B) {
	rate := envFloats("MBENCH_RATE", []float64{2000})[0]
	dur := envDuration("MBENCH_DURATION", 3*time.Second)
	p := startStubProcess(b, RealisticStub)
	for b.Loop() {
		c0, err := cpuSeconds()
		if err != nil {
			b.Fatal(err)
		}
		s0, _ := p.CPUSeconds()
		res, err := Run(context.Background(), Config{Targets: []string{p.URL}, Model: "stub-model", Rate: rate,
			Shape: Shape{Input: 256, Output: 16}, Seed: 1, Warmup: int(rate / 4), Duration: dur, DrainTimeout: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		c1, _ := cpuSeconds()
		s1, _ := p.CPUSeconds()
		n := float64(len(res.Records))
		b.ReportMetric(1e3*(c1-c0)/n, "client-cpu-ms/req")
		b.ReportMetric(1e3*(s1-s0)/n, "stub-cpu-ms/req")
		b.ReportMetric(res.Grade.AchievedRatio, "achieved/offered")
		b.ReportMetric(res.Grade.LagP99Ms, "lag-p99-ms")
	}
}
