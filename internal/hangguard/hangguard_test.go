package hangguard

import (
	"testing"
)

// TestContextEndsBeforeGoTestsDeadline: the context's deadline is go
// test's less the margin, and it is not done while the test runs.
func TestContextEndsBeforeGoTestsDeadline(t *testing.T) {
	ctx, cancel := Context(t)
	defer cancel()
	dl, ok := t.Deadline()
	got, has := ctx.Deadline()
	if ok != has || (ok && !got.Equal(dl.Add(-Margin))) {
		t.Fatalf("context deadline %v (%v), want go test's %v less %v", got, has, dl, Margin)
	}
	if ctx.Err() != nil {
		t.Fatalf("context done while the test runs: %v", ctx.Err())
	}
	cancel()
	if ctx.Err() == nil {
		t.Fatal("cancel did not end the context")
	}
}
