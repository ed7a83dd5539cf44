//go:build linux

package openloop

import (
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Receive times from the kernel. A reactor connection is read with
// recvmsg(2) and SO_TIMESTAMPNS, which reports when the kernel received the
// last segment of what was read, so a token's time is its arrival, not the
// moment the reactor got round to reading it: a reactor that is late — the
// scheduler on a loaded machine, other streams' bytes, or reading every few
// hundred microseconds to spare the CPU (see reactor.loop) — delays what it
// does with a token, never its time.

// The kernel turns receive timestamps on for everyone once a socket asks
// for them, and off when the last such socket closes, both in deferred
// work: the first segments after that come unstamped (and are stamped with
// the clock instead). The first reactor of the process opens one UDP socket
// with SO_TIMESTAMPNS and keeps it, so that they are on from its first
// response on, and stay on between runs.
var stampKeeper = sync.OnceFunc(func() {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err == nil && unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) != nil {
		unix.Close(fd)
	}
})

// rxStamp is a connection's recvmsg(2) state: its message header, buffers
// and the receive time of the last read.
type rxStamp struct {
	on   bool // SO_TIMESTAMPNS is set
	msg  unix.Msghdr
	iov  unix.Iovec
	oob  [64]byte
	real int64 // CLOCK_REALTIME ns of the last read's last segment; 0: not known
	// misses counts reads that came without a time although asked for;
	// past a few (the kernel's deferred start) the connection counts as
	// unstamped (reactor.unstamped): a kernel, or a sandbox such as gVisor,
	// that accepts the option and gives no times.
	misses  int
	counted bool
}

// enableRxStamps asks the kernel for receive times on fd.
func (c *rconn) enableRxStamps() {
	c.rx.on = unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) == nil
}

// recv reads into p, keeping the kernel's receive time of the data.
func (c *rconn) recv(p []byte) (int, error) {
	if !c.rx.on {
		return unix.Read(c.fd, p)
	}
	x := &c.rx
	pointMsg(&x.msg, &x.iov, p, x.oob[:])
	r, _, errno := unix.Syscall(unix.SYS_RECVMSG, uintptr(c.fd), uintptr(unsafe.Pointer(&x.msg)), 0)
	if errno != 0 {
		return 0, errno
	}
	if n := int(r); n > 0 {
		if x.real = parseRxStamp(x.oob[:x.msg.Controllen]); x.real == 0 && !x.counted {
			if x.misses++; x.misses > 2 {
				x.counted = true
				c.re.unstamped.Add(1)
			}
		}
	}
	return int(r), nil
}

// pointMsg points msg at p, through iov, and at oob for control messages.
func pointMsg(msg *unix.Msghdr, iov *unix.Iovec, p, oob []byte) {
	iov.Base = &p[0]
	iov.SetLen(len(p))
	msg.Iov = iov
	msg.SetIovlen(1)
	msg.Control = &oob[0]
	msg.SetControllen(len(oob))
}

// parseRxStamp finds the SCM_TIMESTAMPNS message in a control buffer and
// returns its time in ns, 0 when there is none.
func parseRxStamp(oob []byte) int64 {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return 0
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && l >= unix.CmsgLen(int(unsafe.Sizeof(unix.Timespec{}))) {
			ts := (*unix.Timespec)(unsafe.Pointer(&oob[unix.CmsgLen(0)]))
			return ts.Nano()
		}
		oob = oob[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(oob)):]
	}
	return 0
}

// arrivalClock is c.arrived when the kernel gives receive times, else nil.
func (c *rconn) arrivalClock() func() int64 {
	if !c.rx.on {
		return nil
	}
	return c.arrivedNow
}

// arrived is when the bytes last read from c arrived, on the run's clock:
// the kernel's receive time, converted from CLOCK_REALTIME with both clocks
// read now, never later than now; now itself where the kernel gave none.
func (c *rconn) arrived() int64 {
	t := time.Now()
	run := int64(t.Sub(c.re.clk.start))
	if c.rx.real == 0 {
		return run
	}
	return min(c.rx.real-(t.UnixNano()-run), run)
}
