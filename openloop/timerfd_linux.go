//go:build linux && (amd64 || arm64)

package openloop

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// timerfd is a Linux timer file registered with Go's network poller: a
// goroutine reading it blocks without holding a P, and epoll wakes it when
// the timer expires, to the microsecond — unlike Go timers, which the
// poller rounds up to whole milliseconds.
type timerfd struct {
	fd  int
	f   *os.File // non-blocking, so reads park in the netpoller
	buf [8]byte
}

func newTimerfd() (*timerfd, error) {
	const clockMonotonic = 1
	fd, _, errno := syscall.RawSyscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return nil, errno
	}
	// Never call f.Fd(): it would switch the descriptor to blocking mode.
	return &timerfd{fd: int(fd), f: os.NewFile(fd, "timerfd")}, nil
}

// sleep blocks the calling goroutine for d (≥ 1 µs).
func (t *timerfd) sleep(d time.Duration) error {
	spec := [2]syscall.Timespec{{}, syscall.NsecToTimespec(int64(max(d, time.Microsecond)))} // interval, value
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_TIMERFD_SETTIME, uintptr(t.fd), 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); errno != 0 {
		return errno
	}
	_, err := t.f.Read(t.buf[:])
	return err
}

func (t *timerfd) close() { _ = t.f.Close() }
