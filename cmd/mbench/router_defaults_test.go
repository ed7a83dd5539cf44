package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/internal/simtest"
	"github.com/mbench/mbench/simengine"
)

// TestRouterCacheBoundByDefault: `mbench router` with no --cache-blocks
// bounds each instance's prefix index to the KV capacity its engine reports
// (vllm:cache_config_info: the sim's 128 blocks of 16 tokens), as
// --cache-blocks auto does.
func TestRouterCacheBoundByDefault(t *testing.T) {
	c := simengine.DefaultConfig()
	c.KVBlocks = 128
	sim := simtest.Start(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr lockedBuf
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"mbench", "router", "--addr", "127.0.0.1:0", sim}, &bytes.Buffer{}, &stderr)
	}()
	const want = "prefix index bounded to 128 blocks"
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stderr.String(), want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("router: %v", err)
	}
	if got := stderr.String(); !strings.Contains(got, want) {
		t.Errorf("router's messages %q: want %q", got, want)
	}
}
