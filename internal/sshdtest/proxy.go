package sshdtest

import (
	"net"
	"sync"
	"testing"
)

// proxy forwards 127.0.0.1:port to a backend; it can cut or stall connections.
type proxy struct {
	addr    string
	backend string
	ln      net.Listener

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	gate     sync.RWMutex // write-locked while stalled
	stalled  bool
	accepted int
}

func startProxy(t testing.TB, backend string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sshdtest: proxy: %v", err)
	}
	p := &proxy{addr: ln.Addr().String(), backend: backend, ln: ln, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.resume()
		p.cut()
	})
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.backend)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.accepted++
		p.conns[c] = struct{}{}
		p.conns[b] = struct{}{}
		p.mu.Unlock()
		go p.copy(b, c)
		go p.copy(c, b)
	}
}

// copy forwards src to dst chunk by chunk, holding each chunk while stalled.
func (p *proxy) copy(dst, src net.Conn) {
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			// Stall holds gate's write lock: taking the read lock here
			// waits until Resume, which is the point (a network black hole).
			p.gate.RLock()
			p.gate.RUnlock() //lint:ignore SA2001 the lock is a gate, see above

			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *proxy) stall() {
	p.mu.Lock()
	if p.stalled {
		p.mu.Unlock()
		return
	}
	p.stalled = true
	p.mu.Unlock()
	p.gate.Lock()
}

func (p *proxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		p.gate.Unlock()
	}
}
