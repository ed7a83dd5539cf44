//go:build !linux

package openloop

import "net"

// peekClosed cannot look at the socket on this platform: a closed idle
// connection shows only when it is used (and the request, which never
// reached the server, is sent again on a new connection).
func peekClosed(net.Conn) bool { return false }

// stampable leaves connections as they are on this platform: writeRequest
// stamps a request before its write starts.
func stampable(nc net.Conn) net.Conn { return nc }
