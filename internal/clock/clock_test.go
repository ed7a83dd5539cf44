package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSleep: a sleep lasts its duration, and a cancelled context ends it at
// once with the context's error.
func TestSleep(t *testing.T) {
	start := time.Now()
	if err := Sleep(context.Background(), 20*time.Millisecond); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Errorf("Sleep(20ms) = %v after %s", err, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Minute {
		t.Errorf("Sleep on a cancelled context = %v after %s", err, time.Since(start))
	}
}
