//go:build linux && (amd64 || arm64)

package openloop

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A minimal io_uring (io_uring(7)) for the floor client's io=floor-uring:
// the reads that one epoll_wait reports go to the kernel as one batch of
// IORING_OP_RECVMSG entries in a single io_uring_enter(2), instead of one
// recvmsg(2) each, so the floor with batched reads shows how much of the
// cost per token is the system call's entry and exit rather than the
// kernel's receive. Layouts from include/uapi/linux/io_uring.h.

// uringParams is struct io_uring_params.
type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// uringSQE is struct io_uring_sqe, as IORING_OP_RECVMSG uses it.
type uringSQE struct {
	opcode, flags uint8
	ioprio        uint16
	fd            int32
	off           uint64
	addr          uint64
	len           uint32
	msgFlags      uint32
	userData      uint64
	bufIndex      uint16
	personality   uint16
	spliceFdIn    int32
	addr3, pad    uint64
}

// uringCQE is struct io_uring_cqe.
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

const (
	uringOpRecvmsg     = 10
	uringEnterGetevent = 1
	uringFeatSingleMap = 1
	uringOffSQRing     = 0
	uringOffCQRing     = 0x8000000
	uringOffSQEs       = 0x10000000
)

// uring is one ring, used by one thread.
type uring struct {
	fd                     int
	sqHead, sqTail, sqMask *uint32
	sqArray                []uint32
	sqes                   []uringSQE
	cqHead, cqTail, cqMask *uint32
	cqes                   []uringCQE
	sqMem, cqMem, sqeMem   []byte
	entries                uint32
}

func newUring(entries uint32) (*uring, error) {
	var p uringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &uring{fd: int(fd), entries: p.sqEntries}
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(uringCQE{})))
	var err error
	single := p.features&uringFeatSingleMap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	if r.sqMem, err = unix.Mmap(r.fd, uringOffSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("io_uring mmap: %w", err)
	}
	r.cqMem = r.sqMem
	if !single {
		if r.cqMem, err = unix.Mmap(r.fd, uringOffCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			r.close()
			return nil, fmt.Errorf("io_uring mmap: %w", err)
		}
	}
	if r.sqeMem, err = unix.Mmap(r.fd, uringOffSQEs, int(p.sqEntries)*int(unsafe.Sizeof(uringSQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, fmt.Errorf("io_uring mmap: %w", err)
	}
	at := func(m []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }
	r.sqHead, r.sqTail, r.sqMask = at(r.sqMem, p.sqOff.head), at(r.sqMem, p.sqOff.tail), at(r.sqMem, p.sqOff.ringMask)
	r.sqArray = unsafe.Slice(at(r.sqMem, p.sqOff.array), p.sqEntries)
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	r.cqHead, r.cqTail, r.cqMask = at(r.cqMem, p.cqOff.head), at(r.cqMem, p.cqOff.tail), at(r.cqMem, p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Pointer(&r.cqMem[p.cqOff.cqes])), p.cqEntries)
	return r, nil
}

func (r *uring) close() {
	if r.sqeMem != nil {
		_ = unix.Munmap(r.sqeMem)
	}
	if r.cqMem != nil && &r.cqMem[0] != &r.sqMem[0] {
		_ = unix.Munmap(r.cqMem)
	}
	if r.sqMem != nil {
		_ = unix.Munmap(r.sqMem)
	}
	unix.Close(r.fd)
}

// recvmsg queues a recvmsg(2) of msg on fd, tagged tag.
func (r *uring) recvmsg(fd int, msg *unix.Msghdr, tag uint64) {
	tail := atomic.LoadUint32(r.sqTail)
	i := tail & *r.sqMask
	r.sqes[i] = uringSQE{opcode: uringOpRecvmsg, fd: int32(fd), addr: uint64(uintptr(unsafe.Pointer(msg))), len: 1, userData: tag}
	r.sqArray[i] = i
	atomic.StoreUint32(r.sqTail, tail+1)
}

// submitWait submits the n queued entries and waits for n completions,
// handing each to done (the tag and the result: bytes, or −errno).
func (r *uring) submitWait(n int, done func(tag uint64, res int32)) error {
	for submit := n; n > 0; {
		got, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(submit), uintptr(n), uringEnterGetevent, 0, 0)
		if errno != 0 && errno != unix.EINTR {
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
		if errno == 0 {
			submit -= int(got)
		}
		head, tail := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
		for ; head != tail; head++ {
			e := r.cqes[head&*r.cqMask]
			done(e.userData, e.res)
			n--
		}
		atomic.StoreUint32(r.cqHead, head)
	}
	return nil
}
