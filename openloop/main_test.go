package openloop

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/cpupin"
	"github.com/mbench/mbench/openloop/stub"
)

// TestMain doubles as the child stub process of startStubProcess: with
// stub.OptionsEnv set, the test binary serves the stub instead of testing.
func TestMain(m *testing.M) {
	if spec := os.Getenv(loadChildEnv); spec != "" {
		if err := runLoadChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
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

// runIO runs cfg with the given request I/O: "reactor" (the default, on
// Linux), "reactor-eachwake" (the reactor woken for every event, without
// coalescing its waits) or "goroutines" (a goroutine per request).
func runIO(tb testing.TB, cfg Config, io string) (*runner, *Result) {
	tb.Helper()
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	r := newRunner(cfg, defaultWaitMode)
	r.noReactor = io == "goroutines"
	r.eachWake = io == "reactor-eachwake"
	res, err := r.run(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if (r.re != nil) != (io != "goroutines" && runtime.GOOS == "linux" && runtime.GOMAXPROCS(0) >= 2) {
		tb.Fatalf("io=%s on %s: reactor in use %v", io, runtime.GOOS, r.re != nil)
	}
	return r, res
}

// BenchmarkStreamedRequestCPU is the client's CPU per streamed request: the
// stub runs in a child process (MBENCH_TOKENS tokens, default 16, one flush
// each, first after 20 ms, then every MBENCH_GAP, default 1 ms), the client
// sends 256-token prompts, Poisson at MBENCH_RATE (default 2000 req/s) for
// MBENCH_DURATION (default 3 s) — the client pinned to MBENCH_CLIENT_CPUS
// and the stub to MBENCH_STUB_CPUS where set (Linux), each with as many Ps
// (the client at least two, which the reactor needs) —
// and the process's
// CPU time, which is now the client's alone, is divided by the requests
// sent. Sub-benchmarks, run one after the other in each round:
// io=reactor (the default on Linux: requests as coroutines over one epoll
// set, its waits coalesced while events are dense), io=reactor-eachwake
// (the same, woken for every event: the baseline of the coalescing),
// io=goroutines (a goroutine per request), and on Linux the floor client's
// io=floor and io=floor-uring (floor_linux_test.go: what any client that
// reads each token pays, the baseline of mbench's own cost). Beside the CPU it
// reports the system part of it and the voluntary context switches per
// request (getrusage). Run it with -benchtime=1x -count=N.
func BenchmarkStreamedRequestCPU(b *testing.B) {
	rate := envFloats("MBENCH_RATE", []float64{2000})[0]
	dur := envDuration("MBENCH_DURATION", 3*time.Second)
	opts := RealisticStub
	opts.Tokens = int(envFloats("MBENCH_TOKENS", []float64{float64(opts.Tokens)})[0])
	opts.Gap = envDuration("MBENCH_GAP", opts.Gap)
	if v := os.Getenv("MBENCH_STUB_CPUS"); v != "" {
		cpus, err := cpupin.Parse(v)
		if err != nil {
			b.Fatal(err)
		}
		opts.CPUs = cpus
	}
	p := startStubProcess(b, opts)
	if v := os.Getenv("MBENCH_CLIENT_CPUS"); v != "" {
		cpus, err := cpupin.Parse(v)
		if err == nil {
			err = cpupin.Self(cpus)
		}
		if err != nil {
			b.Fatal(err)
		}
		runtime.GOMAXPROCS(max(2, len(cpus))) // the reactor needs two Ps (see run)
	}
	for _, io := range streamedIOs {
		b.Run("io="+io, func(b *testing.B) {
			if io == "floor" || io == "floor-uring" {
				benchFloor(b, p, io == "floor-uring", rate, dur, opts.Tokens)
				return
			}
			for b.Loop() {
				c0, err := cpuSeconds()
				if err != nil {
					b.Fatal(err)
				}
				s0, _ := p.CPUSeconds()
				var ru0, ru1 syscall.Rusage
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
				cfg := Config{Targets: []string{p.URL}, Model: "stub-model", Rate: rate,
					Shape: Shape{Input: 256, Output: opts.Tokens}, Seed: 1, Warmup: int(rate / 4), Duration: dur, DrainTimeout: 10 * time.Second}
				r, res := runIO(b, cfg, io)
				c1, _ := cpuSeconds()
				s1, _ := p.CPUSeconds()
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
				n := float64(len(res.Records))
				sec := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
				b.ReportMetric(1e3*(sec(ru1.Stime)-sec(ru0.Stime))/n, "client-sys-ms/req")
				b.ReportMetric(float64(ru1.Nvcsw-ru0.Nvcsw)/n, "vol-ctxsw/req")
				if r.re != nil {
					b.ReportMetric(float64(r.re.wakeCount())/n, "reactor-wakes/req")
				}
				b.ReportMetric(1e3*(c1-c0)/n, "client-cpu-ms/req")
				b.ReportMetric(1e3*(s1-s0)/n, "stub-cpu-ms/req")
				b.ReportMetric(res.Grade.AchievedRatio, "achieved/offered")
				b.ReportMetric(res.Grade.LagP99Ms, "lag-p99-ms")
			}
		})
	}
}
