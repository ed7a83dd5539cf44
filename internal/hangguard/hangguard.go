// Package hangguard gives an end-to-end test the context its work runs
// under: it ends where go test's own -timeout would end the test binary,
// less a margin for the work to stop cleanly (engines stopped, nothing
// orphaned). Its bound is a hang's, never the machine's speed: a test on
// a busy machine takes longer and still passes.
package hangguard

import (
	"context"
	"testing"
	"time"
)

// Margin is how long before go test's deadline the context ends: time for
// an interrupted sweep to stop its engines and report.
const Margin = 45 * time.Second

// deadliner is the part of *testing.T that knows go test's deadline.
type deadliner interface {
	Deadline() (time.Time, bool)
}

// Context is a context ending Margin before go test's deadline (no end
// where go test has none, as with -timeout 0, or for a benchmark). It is
// not t.Context(), which ends before t's cleanups run: work a cleanup
// still does (stopping engines) may hold it until the caller cancels.
func Context(t testing.TB) (context.Context, context.CancelFunc) {
	ctx := context.Background()
	if d, ok := t.(deadliner); ok {
		if dl, ok := d.Deadline(); ok {
			return context.WithDeadline(ctx, dl.Add(-Margin))
		}
	}
	return context.WithCancel(ctx)
}
