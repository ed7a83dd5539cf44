// Package simtest starts simulated engines for tests: in process, on
// 127.0.0.1 at a port the kernel picks, stopped when the test ends.
package simtest

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/mbench/mbench/simengine"
)

// Start serves a sim with cfg (its Addr is replaced) until t ends and
// returns its base URL.
func Start(t testing.TB, cfg simengine.Config) string {
	t.Helper()
	u, _ := StartEngine(t, cfg)
	return u
}

// StartMooncake is Start for a MooncakeConnector sim (cfg.KVConnector is
// set to it): a producer's bootstrap server listens on a port the kernel
// picks, returned with the URL (0 for a kv_consumer, which serves none).
func StartMooncake(t testing.TB, cfg simengine.Config) (string, int) {
	t.Helper()
	cfg.KVConnector = simengine.KVConnectorMooncake
	if cfg.KVRole != simengine.KVRoleConsumer {
		cfg.BootstrapAddr = "127.0.0.1:0"
	}
	u, e := StartEngine(t, cfg)
	if cfg.KVRole == simengine.KVRoleConsumer {
		return u, 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.BootstrapAddr() == "" {
		if time.Now().After(deadline) {
			t.Fatal("sim: the bootstrap server did not listen within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	_, port, _ := net.SplitHostPort(e.BootstrapAddr())
	p, _ := strconv.Atoi(port)
	return u, p
}

// StartEngine is Start that also returns the engine.
func StartEngine(t testing.TB, cfg simengine.Config) (string, *simengine.Engine) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = ln.Addr().String()
	e, err := simengine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sim: %v", err)
		}
	})
	return "http://" + cfg.Addr, e
}
