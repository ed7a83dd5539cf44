// Package porttest reserves blocks of TCP ports for tests whose engines
// listen on a fixed engine.port: below the kernel's ephemeral port range
// (where no outgoing connection takes a port at random, so a port found
// free stays free), one block per test, kept apart across test processes
// by a lock file per block.
package porttest

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

// Size is how many consecutive ports a test sweep may use from its
// engine.port on (instances and router count up from it).
const Size = 8

// Base reserves a block of Size free ports for engine.port in a
// test matrix and returns its first port. The block lies below the host's
// ephemeral port range, as the README asks of engine ports: there no
// outgoing connection takes a port at random, so a port found free stays
// free. Concurrent test processes are kept apart by an exclusive lock on a
// file per block (held until the test ends); each port is checked free by
// listening on it.
func Base(t testing.TB) string {
	t.Helper()
	lo, hi := 10000, ephemeralLow(t)
	if hi-lo < 16*Size {
		t.Fatalf("the ephemeral port range starts at %d: no room below it for test engine ports", hi)
	}
	dir := filepath.Join(os.TempDir(), "mbench-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	blocks := (hi - lo) / Size
	for range 200 {
		base := lo + rand.IntN(blocks)*Size
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(base)+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil || !blockFree(base) {
			f.Close() // another test holds this block, or a port of it is taken
			continue
		}
		t.Cleanup(func() { f.Close() }) // releases the lock
		return strconv.Itoa(base)
	}
	t.Fatalf("no free block of %d ports in %d..%d", Size, lo, hi)
	return ""
}

// blockFree reports whether every port of the block can be listened on.
func blockFree(base int) bool {
	for p := base; p < base+Size; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow(t testing.TB) int {
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
