package session

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/coder/websocket"
)

// coder/websocket hands every frame to the kernel on its own: one write system call per frame.
// On a node fanning messages out to thousands of sockets those calls are most of its CPU
// (docs/BENCHMARKS.md, "Issue 33 targets"), and the client pays a read call per frame too. When
// the writer finds several frames waiting it gathers them and hands them over in one write: the
// frames, their order and their bytes on the wire are the same, only the system calls are fewer.

// maxGathered bounds what a round holds before it is handed to the kernel anyway.
const maxGathered = 32 << 10

// gatherBuffers are the buffers of the rounds in progress, shared by all sessions: an idle
// session holds none.
var gatherBuffers = sync.Pool{New: func() any { b := make([]byte, 0, maxGathered); return &b }}

// gatherConn is the socket under a session's WebSocket. Between hold and release, what
// coder/websocket writes is kept and then written at once; otherwise writes go straight through.
type gatherConn struct {
	net.Conn
	mu   sync.Mutex
	held *[]byte // nil unless holding
	// handOver is called, under mu, just before what was held goes to the kernel.
	handOver func()
}

func (g *gatherConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == nil {
		return g.Conn.Write(p)
	}
	if len(*g.held)+len(p) > maxGathered {
		if err := g.writeHeld(); err != nil {
			return 0, err
		}
		if len(p) > maxGathered {
			return g.Conn.Write(p)
		}
	}
	*g.held = append(*g.held, p...)
	return len(p), nil
}

// hold keeps the writes that follow until release.
func (g *gatherConn) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == nil {
		g.held = gatherBuffers.Get().(*[]byte)
	}
}

// release writes what was kept since hold, and lets writes go straight through again.
func (g *gatherConn) release() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == nil {
		return nil
	}
	err := g.writeHeld()
	gatherBuffers.Put(g.held)
	g.held = nil
	return err
}

func (g *gatherConn) writeHeld() error {
	b := *g.held
	*g.held = b[:0]
	if len(b) == 0 {
		return nil
	}
	if g.handOver != nil {
		g.handOver()
	}
	if _, err := g.Conn.Write(b); err != nil {
		return fmt.Errorf("write gathered frames: %w", err)
	}
	return nil
}

// Socket is an accepted WebSocket whose frames a session's writer can gather.
type Socket struct {
	*websocket.Conn
	gather *gatherConn
}

// Accept upgrades the request to a WebSocket as websocket.Accept does, on a socket whose writes
// the session gathers. On failure Accept has answered the request.
func Accept(w http.ResponseWriter, r *http.Request, opts *websocket.AcceptOptions) (*Socket, error) {
	h := &gatheringHijacker{ResponseWriter: w}
	conn, err := websocket.Accept(h, r, opts)
	if err != nil {
		return nil, err
	}
	return &Socket{Conn: conn, gather: h.gather}, nil
}

// gatheringHijacker hands coder/websocket the hijacked connection wrapped in a gatherConn, with
// a write buffer in front of it.
type gatheringHijacker struct {
	http.ResponseWriter
	gather *gatherConn
}

func (h *gatheringHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the response writer cannot be hijacked")
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := rw.Writer.Flush(); err != nil { // nothing is buffered after the upgrade's answer; to be sure
		_ = conn.Close()
		return nil, nil, fmt.Errorf("flush the upgrade: %w", err)
	}
	h.gather = &gatherConn{Conn: conn}
	return h.gather, bufio.NewReadWriter(rw.Reader, bufio.NewWriterSize(h.gather, rw.Writer.Size())), nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (h *gatheringHijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }
