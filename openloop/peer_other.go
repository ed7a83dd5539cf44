//go:build !linux

package openloop

import "net"

// peekClosed cannot look at the socket on this platform: a closed idle
// connection shows only when it is used (and the request, which never
// reached the server, is sent again on a new connection).
func peekClosed(net.Conn) bool { return false }
