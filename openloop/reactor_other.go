//go:build !linux

package openloop

import (
	"context"
	"errors"
	"net"
	"net/netip"
)

// reactor exists on Linux only (epoll); elsewhere every request runs on a
// goroutine of its own.
type reactor struct {
	clk      *clock
	eachWake bool
}

func newReactor() (*reactor, error) { return nil, errors.New("no connection reactor on this platform") }

func (*reactor) submit(func()) { panic("openloop: no reactor") }

func (*reactor) close() {}

func (*reactor) wakeCount() int64 { return 0 }

func (*reactor) dial(context.Context, netip.AddrPort) (net.Conn, error) {
	return nil, errors.New("no connection reactor on this platform")
}

func (r *runner) runOpenReactor(<-chan []*job) bool { panic("openloop: no reactor") }
