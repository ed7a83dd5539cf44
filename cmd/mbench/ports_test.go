package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// portBlock is how many consecutive ports a test sweep may use from its
// engine.port on (instances and router count up from it).
const portBlock = 8

// freePortBase reserves a block of portBlock free ports for engine.port in a
// test matrix and returns its first port. The block lies below the host's
// ephemeral port range, as the README asks of engine ports: there no
// outgoing connection takes a port at random, so a port found free stays
// free. Concurrent test processes are kept apart by an exclusive lock on a
// file per block (held until the test ends); each port is checked free by
// listening on it.
func freePortBase(t *testing.T) string {
	t.Helper()
	lo, hi := 10000, ephemeralLow(t)
	if hi-lo < 16*portBlock {
		t.Fatalf("the ephemeral port range starts at %d: no room below it for test engine ports", hi)
	}
	dir := filepath.Join(os.TempDir(), "mbench-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	blocks := (hi - lo) / portBlock
	for try := 0; try < 200; try++ {
		base := lo + rand.IntN(blocks)*portBlock
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(base)+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // another test holds this block
			continue
		}
		if !blockFree(base) {
			f.Close()
			continue
		}
		t.Cleanup(func() { f.Close() }) // releases the lock
		return strconv.Itoa(base)
	}
	t.Fatalf("no free block of %d ports in %d..%d", portBlock, lo, hi)
	return ""
}

// blockFree reports whether every port of the block can be listened on.
func blockFree(base int) bool {
	for p := base; p < base+portBlock; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768 // the kernel's default
	}
	var lo, hi int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &lo, &hi); err != nil || lo <= 1024 {
		t.Fatalf("ip_local_port_range %q: cannot place test engine ports below it", b)
	}
	return lo
}

// TestFreePortBase: blocks are below the ephemeral range, free, and two
// reservations never share a block.
func TestFreePortBase(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	low := ephemeralLow(t)
	for range 20 {
		p, _ := strconv.Atoi(freePortBase(t))
		if p < 1024 || p+portBlock > low {
			t.Errorf("block %d..%d is not below the ephemeral range (from %d)", p, p+portBlock-1, low)
		}
		if seen[p] {
			t.Errorf("block %d reserved twice", p)
		}
		seen[p] = true
	}
}
