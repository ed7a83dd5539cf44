//go:build !linux

package openloop

import "time"

// haveNanosleep is false: the waiter uses its spin strategy only.
const haveNanosleep = false

func setTimerSlack() {}

func nanosleep(d time.Duration) { time.Sleep(d) }
