package testenv

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FaultProxy is a TCP proxy in front of a server that a test breaks the way a network fails: it
// cuts every connection through it, refuses new ones, or swallows what the server sends while
// still forwarding what the client sends. The server behind it keeps running with all its state.
type FaultProxy struct {
	l        net.Listener
	upstream string
	wg       sync.WaitGroup // serve and every pipe

	swallow atomic.Bool // drop what the server sends instead of forwarding it

	mu     sync.Mutex
	refuse bool
	conns  map[net.Conn]struct{} // both ends of every open pipe
}

// StartFaultProxy listens on a free loopback port and forwards every connection to upstream
// ("host:port") until the test ends.
func StartFaultProxy(t testing.TB, upstream string) *FaultProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for the fault proxy: %v", err)
	}
	p := &FaultProxy{l: l, upstream: upstream, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		_ = l.Close() // ends serve
		p.Cut()       // ends the pipes
		p.wg.Wait()
	})
	return p
}

// Addr is the proxy's "host:port", to give clients instead of the upstream's.
func (p *FaultProxy) Addr() string { return p.l.Addr().String() }

// Cut closes every connection through the proxy, as a network drop does; new ones are accepted
// unless SetRefuse(true) was called.
func (p *FaultProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close() // its pipe sees the error and ends
	}
	clear(p.conns)
}

// SetRefuse makes new connections close at once (true) or pass again (false); open ones are
// left alone.
func (p *FaultProxy) SetRefuse(refuse bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = refuse
}

// SetDown takes the network down (true: cut every connection and refuse new ones) or brings it
// back (false).
func (p *FaultProxy) SetDown(down bool) {
	p.SetRefuse(down)
	if down {
		p.Cut()
	}
}

// SwallowReplies makes the proxy drop what the server sends (true), while what the client sends
// still reaches the server, or forward it again (false).
func (p *FaultProxy) SwallowReplies(swallow bool) { p.swallow.Store(swallow) }

func (p *FaultProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return // closed at cleanup
		}
		if !p.track(c) {
			_ = c.Close() // refused: the client sees the connection drop at once
			continue
		}
		p.wg.Go(func() { p.pipe(c) })
	}
}

// track remembers c so Cut can close it; while refusing it returns false instead.
func (p *FaultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *FaultProxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// pipe forwards between client c and a new connection to the upstream until either side closes
// or the proxy cuts them.
func (p *FaultProxy) pipe(c net.Conn) {
	defer p.forget(c)
	defer c.Close()
	u, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	if !p.track(u) {
		return // refused or cut while dialing
	}
	defer p.forget(u)
	toServer := make(chan struct{})
	go func() { // owned by this pipe, which waits for it below
		defer close(toServer)
		_, _ = io.Copy(u, c) // ends when either side is closed
		_ = u.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := u.Read(buf)
		if n > 0 && !p.swallow.Load() {
			if _, werr := c.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = c.Close() // ends the copy to the server
	<-toServer
}
