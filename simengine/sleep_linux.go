package simengine

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// preciseTimer sleeps with µs precision on Linux: a read of a timerfd parks
// the goroutine in the netpoller (no thread held), and the kernel's hrtimer
// wakes it within tens of µs, where Go's timers round up to the next
// millisecond. If no timerfd can be made it falls back to nanosleep(2).
// It belongs to the loop goroutine.
type preciseTimer struct {
	f   *os.File // nil: nanosleep fallback
	buf [8]byte
}

func newPreciseTimer() *preciseTimer {
	const clockMonotonic = 1
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return &preciseTimer{}
	}
	return &preciseTimer{f: os.NewFile(fd, "timerfd")}
}

type itimerspec struct{ interval, value syscall.Timespec }

// sleep blocks for d (> 0), returning early only on an interrupted sleep;
// the caller loops on its deadline.
func (p *preciseTimer) sleep(d time.Duration) {
	if p.f == nil {
		ts := syscall.NsecToTimespec(int64(d))
		_ = syscall.Nanosleep(&ts, nil)
		return
	}
	its := itimerspec{value: syscall.NsecToTimespec(max(int64(d), 1))}
	rc, err := p.f.SyscallConn()
	if err != nil {
		time.Sleep(d)
		return
	}
	var errno syscall.Errno
	cerr := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&its)), 0, 0, 0)
	})
	if cerr != nil || errno != 0 {
		time.Sleep(d)
		return
	}
	_, _ = p.f.Read(p.buf[:]) // the expiration count; an error just ends the sleep
}

func (p *preciseTimer) close() {
	if p.f != nil {
		_ = p.f.Close()
	}
}
