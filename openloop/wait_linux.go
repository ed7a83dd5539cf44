//go:build linux

package openloop

import (
	"syscall"
	"time"
)

// haveNanosleep reports that nanosleep and a per-thread timer slack exist.
const haveNanosleep = true

// prSetTimerSlack is PR_SET_TIMERSLACK from <linux/prctl.h>.
const prSetTimerSlack = 29

// setTimerSlack sets the calling thread's timer slack to 1 ns (default 50 µs),
// so nanosleep wakes when asked.
func setTimerSlack() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
}

// nanosleep sleeps d on the calling thread.
func nanosleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
