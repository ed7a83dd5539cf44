package porttest

import (
	"strconv"
	"testing"
)

// TestBase: blocks are below the ephemeral range, free, and two
// reservations never share a block.
func TestBase(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	low := ephemeralLow(t)
	for range 20 {
		p, _ := strconv.Atoi(Base(t))
		if p < 1024 || p+Size > low {
			t.Errorf("block %d..%d is not below the ephemeral range (from %d)", p, p+Size-1, low)
		}
		if seen[p] {
			t.Errorf("block %d reserved twice", p)
		}
		seen[p] = true
	}
}
