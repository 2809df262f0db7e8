package session

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// countingListener counts the writes to the connections it accepts.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, writes: l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// acceptOne serves one WebSocket upgrade with Accept and returns the server's socket, the
// client's connection and the count of writes to the server's side of the socket.
func acceptOne(t *testing.T) (*Socket, *websocket.Conn, *atomic.Int64) {
	t.Helper()
	writes := new(atomic.Int64)
	accepted := make(chan *Socket, 1)
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sock, err := Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		accepted <- sock
	}))
	hs.Listener = countingListener{Listener: hs.Listener, writes: writes}
	hs.Start()
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	client.SetReadLimit(1 << 20)
	t.Cleanup(func() { _ = client.CloseNow() })
	select {
	case sock := <-accepted:
		t.Cleanup(func() { _ = sock.CloseNow() })
		return sock, client, writes
	case <-ctx.Done():
		t.Fatal("the upgrade was not served")
		return nil, nil, nil
	}
}

// Frames written while the socket holds reach the peer whole and in order, in one write to the
// kernel, and each handed over once; a frame too large to hold goes straight after them.
func TestHeldFramesGoOutInOneWrite(t *testing.T) {
	sock, client, writes := acceptOne(t)
	handedOver := 0
	sock.gather.handOver = func() { handedOver++ }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	before := writes.Load()
	sock.gather.hold()
	want := []string{"one", "two", strings.Repeat("3", 1000)}
	for _, f := range want {
		if err := sock.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			t.Fatalf("write %q: %v", f[:3], err)
		}
	}
	if got := writes.Load() - before; got != 0 {
		t.Fatalf("%d writes reached the socket while holding; want none before release", got)
	}
	if err := sock.gather.release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	if got := writes.Load() - before; got != 1 || handedOver != 1 {
		t.Fatalf("three held frames took %d writes and %d hand-overs; want one of each", got, handedOver)
	}

	before = writes.Load()
	sock.gather.hold()
	big := strings.Repeat("b", maxGathered+1)
	want = append(want, "small", big)
	for _, f := range want[3:] {
		if err := sock.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	if err := sock.gather.release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	if got := writes.Load() - before; got < 2 {
		t.Fatalf("a held frame and one larger than the buffer took %d writes; want the held one first, then the large one", got)
	}
	if err := sock.Write(ctx, websocket.MessageText, []byte("after")); err != nil {
		t.Fatalf("write after release: %v", err)
	}
	want = append(want, "after")

	for i, w := range want {
		_, got, err := client.Read(ctx)
		if err != nil {
			t.Fatalf("read frame %d: %v", i, err)
		}
		if string(got) != w {
			t.Fatalf("frame %d is %d bytes starting %q; want %d bytes starting %q", i, len(got), prefix(got), len(w), prefix([]byte(w)))
		}
	}
}

func prefix(b []byte) string { return fmt.Sprintf("%.8s", b) }
