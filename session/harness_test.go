package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/testenv"
	"github.com/chatd/chatd/testenv/logtest"
)

// TestMain fails the package if any test leaves a goroutine behind: no session goroutine may
// outlive Serve.
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

// pollTimeout bounds every wait in these tests. They finish in milliseconds when the code works;
// the margin is for a loaded machine running the race detector.
const pollTimeout = 30 * time.Second

// eventually polls cond until it holds, failing with what was awaited and the last state seen.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.CheckFor(t, pollTimeout, 2*time.Millisecond, func() error {
		if ok, state := cond(); !ok {
			return fmt.Errorf("waiting for %s; last state: %s", what, state)
		}
		return nil
	})
}

// receive waits for a value on ch.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(pollTimeout):
		t.Fatalf("timed out after %v waiting for %s", pollTimeout, what)
		panic("unreachable")
	}
}

// fakeHandler hands each opened session to the test and runs handle for each frame.
type fakeHandler struct {
	sessions chan *session.Session
	handle   func(ctx context.Context, s *session.Session, f protocol.ClientFrame) error
	closed   chan *session.Session
}

func (h *fakeHandler) Opened(_ context.Context, s *session.Session) error {
	h.sessions <- s
	return nil
}

func (h *fakeHandler) HandleFrame(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	if h.handle == nil {
		return s.Reply(ctx, protocol.ServerFrame{Type: protocol.TypeOK, ID: f.ID})
	}
	return h.handle(ctx, s, f)
}

func (h *fakeHandler) Closed(s *session.Session) { h.closed <- s }

// server is an httptest server whose connections are sessions of the user named in ?user=.
type server struct {
	t       *testing.T
	url     string
	handler *fakeHandler
	log     *logtest.Buffer
}

type serverOptions struct {
	cfg    session.Config
	limits *session.Limits
	handle func(ctx context.Context, s *session.Session, f protocol.ClientFrame) error
	// smallBuffers shrinks the server's socket send buffer, so that a client that does not read
	// pushes back on the writer after a few kilobytes instead of a few megabytes of kernel buffer.
	smallBuffers bool
}

func startServer(t *testing.T, o serverOptions) *server {
	t.Helper()
	h := &fakeHandler{
		sessions: make(chan *session.Session, 16),
		handle:   o.handle,
		closed:   make(chan *session.Session, 16),
	}
	logs := &logtest.Buffer{}
	log := zerolog.New(logs)
	var serving sync.WaitGroup
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := session.Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		serving.Add(1)
		defer serving.Done()
		// As the server does, so that tests see the remote address in the session's logs.
		s := session.New(conn, r.URL.Query().Get("user"), session.Peer{Addr: r.RemoteAddr}, o.cfg, o.limits, log)
		if err := s.Serve(context.Background(), h); err != nil {
			t.Errorf("serve: %v", err)
		}
	}))
	if o.smallBuffers {
		hs.Listener = smallBufferListener{hs.Listener}
	}
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		done := make(chan struct{})
		go func() { serving.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(pollTimeout):
			t.Errorf("sessions still serving %v after the test ended", pollTimeout)
		}
	})
	return &server{t: t, url: "ws" + strings.TrimPrefix(hs.URL, "http"), handler: h, log: logs}
}

// smallBufferSize is the socket buffer a small-buffer connection asks for; the kernel rounds it up.
const smallBufferSize = 4 << 10

type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(smallBufferSize)
	}
	return c, err
}

// client is a test's WebSocket client. Once reading it records every frame it receives.
type client struct {
	t    *testing.T
	conn *websocket.Conn
	sess *session.Session // the server side of this connection

	mu     sync.Mutex
	frames []protocol.ServerFrame
	ended  bool
	status websocket.StatusCode
	done   chan struct{}
}

// dial connects as user. The client does not read until read is called.
func (s *server) dial(user string) *client {
	t := s.t
	t.Helper()
	transport := &http.Transport{}
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, s.url+"?user="+user, &websocket.DialOptions{HTTPClient: &http.Client{Transport: transport}})
	if err != nil {
		t.Fatalf("dial as %s: %v", user, err)
	}
	transport.CloseIdleConnections()
	conn.SetReadLimit(-1)
	c := &client{t: t, conn: conn, status: -1, done: make(chan struct{})}
	c.sess = receive(t, "the session of "+user+" to open", s.handler.sessions)
	t.Cleanup(func() {
		_ = conn.CloseNow()
		select {
		case <-c.done:
		default:
			if c.reading() {
				<-c.done
			}
		}
	})
	return c
}

func (c *client) reading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames != nil || c.ended
}

// read starts recording frames until the connection ends.
func (c *client) read() {
	c.mu.Lock()
	c.frames = []protocol.ServerFrame{}
	c.mu.Unlock()
	go func() {
		defer close(c.done)
		for {
			_, data, err := c.conn.Read(context.Background())
			if err != nil {
				c.mu.Lock()
				c.ended, c.status = true, websocket.CloseStatus(err)
				c.mu.Unlock()
				return
			}
			var f protocol.ServerFrame
			if err := json.Unmarshal(data, &f); err != nil {
				c.t.Errorf("server sent a frame that is not JSON: %v", err)
			}
			c.mu.Lock()
			c.frames = append(c.frames, f)
			c.mu.Unlock()
		}
	}()
}

// send writes a client frame.
func (c *client) send(f map[string]any) {
	c.t.Helper()
	if err := c.trySend(f); err != nil {
		c.t.Fatalf("send %v: %v", f, err)
	}
}

func (c *client) trySend(f map[string]any) error {
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return c.sendRaw(data)
}

// sendRaw writes an encoded client frame.
func (c *client) sendRaw(data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	return c.conn.Write(ctx, websocket.MessageText, data)
}

// snapshot returns the frames received so far and whether the connection ended, with its code.
func (c *client) snapshot() ([]protocol.ServerFrame, bool, websocket.StatusCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]protocol.ServerFrame(nil), c.frames...), c.ended, c.status
}

// progress reports how many frames arrived and whether the connection ended, without copying.
func (c *client) progress() (int, bool, websocket.StatusCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.frames), c.ended, c.status
}

// reply waits for the frame that answers request id.
func (c *client) reply(id string) protocol.ServerFrame {
	c.t.Helper()
	var found protocol.ServerFrame
	eventually(c.t, "a reply to "+id, func() (bool, string) {
		frames, ended, status := c.snapshot()
		for _, f := range frames {
			if f.ID == id {
				found = f
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d frames, ended=%v status=%v", len(frames), ended, status)
	})
	return found
}

// closedWith waits for the connection to end and checks its close code.
func (c *client) closedWith(want websocket.StatusCode) {
	c.t.Helper()
	eventually(c.t, fmt.Sprintf("the connection to close with %v", want), func() (bool, string) {
		frames, ended, _ := c.snapshot()
		return ended, fmt.Sprintf("%d frames, open", len(frames))
	})
	if _, _, status := c.snapshot(); status != want {
		c.t.Fatalf("connection closed with %v; want %v", status, want)
	}
}

// stillOpen proves the connection works: a ping gets its pong.
func (c *client) stillOpen(id string) {
	c.t.Helper()
	c.send(ping(id))
	if f := c.reply(id); f.Type != protocol.TypePong {
		c.t.Fatalf("ping %s answered with %+v; want a pong", id, f)
	}
}

func ping(id string) map[string]any { return map[string]any{"type": protocol.TypePing, "id": id} }

func typing(id, conv string) map[string]any {
	return map[string]any{"type": protocol.TypeTyping, "id": id, "conversationId": conv}
}

func list(id string) map[string]any {
	return map[string]any{"type": protocol.TypeListConversations, "id": id}
}

// frameOfSize encodes a server frame of about n bytes whose body says what it is.
func frameOfSize(label string, n int) []byte {
	body := label + strings.Repeat(".", max(0, n-len(label)-40))
	data, err := protocol.Encode(protocol.ServerFrame{Type: protocol.TypeMessage, Body: body})
	if err != nil {
		panic(err)
	}
	return data
}
