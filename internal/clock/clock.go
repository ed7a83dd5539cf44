// Package clock is the one context-aware sleep of mbench's polling loops:
// wait a while, or less when the context ends first.
package clock

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done, whichever comes first; it returns
// ctx's error in the second case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
