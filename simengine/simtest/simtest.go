// Package simtest starts simulated engines for tests: in process, on
// 127.0.0.1 at a port the kernel picks, stopped when the test ends.
package simtest

import (
	"context"
	"net"
	"testing"

	"github.com/mbench/mbench/simengine"
)

// Start serves a sim with cfg (its Addr is replaced) until t ends and
// returns its base URL.
func Start(t testing.TB, cfg simengine.Config) string {
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
	return "http://" + cfg.Addr
}
