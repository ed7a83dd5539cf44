//go:build !linux

package simengine

import "time"

// preciseTimer sleeps; off Linux Go's timers are precise enough.
type preciseTimer struct{}

func newPreciseTimer() *preciseTimer { return &preciseTimer{} }

func (p *preciseTimer) sleep(d time.Duration) { time.Sleep(d) }

func (p *preciseTimer) close() {}
