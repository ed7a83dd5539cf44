package main

import (
	"net"
	"strconv"
	"testing"
)

// freePortBase finds a port p such that p and p+1 .. p+7 look free on
// 127.0.0.1 right now, for engine.port in test matrices.
func freePortBase(t *testing.T) string {
	t.Helper()
	for try := 0; try < 50; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p > 65000 {
			continue
		}
		ok := true
		for i := 1; i < 8; i++ {
			l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+i))
			if err != nil {
				ok = false
				break
			}
			l2.Close()
		}
		if ok {
			return strconv.Itoa(p)
		}
	}
	t.Fatal("no free port range")
	return ""
}
