package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatd/chatd/client"
)

// pushServer accepts one WebSocket and writes n message pushes with seqs 1..n, then closes it
// with a going-away status if end is set, or waits for the client to close.
func pushServer(t *testing.T, n int, end bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		for seq := 1; seq <= n; seq++ {
			if err := ws.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"type":"message","seq":%d}`, seq)); err != nil {
				t.Errorf("write push %d: %v", seq, err)
				return
			}
		}
		if end {
			_ = ws.Close(websocket.StatusGoingAway, "bye")
			return
		}
		_, _, _ = ws.Read(ctx) // until the client closes
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// readSeqs reads n pushes and checks that they carry seqs 1..n in order.
func readSeqs(t *testing.T, c *client.Conn, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for want := int64(1); want <= int64(n); want++ {
		select {
		case f, ok := <-c.Pushes():
			if !ok {
				t.Fatalf("pushes closed after seq %d of %d: %v", want-1, n, c.Err())
			}
			if f.Seq != want {
				t.Fatalf("push carries seq %d, want %d", f.Seq, want)
			}
		case <-timeout:
			t.Fatalf("only %d of %d pushes arrived within 30 s", want-1, n)
		}
	}
}

// A reader that looks at Pushes late still gets every frame the server pushed meanwhile, in order.
func TestPushesWaitForALateReader(t *testing.T) {
	const n = 5000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, pushServer(t, n, true), "token", &client.Options{SkipSync: true})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	select {
	case <-c.Done(): // every push is queued: the server closed after the last one
	case <-ctx.Done():
		t.Fatal("the server's close did not arrive within 30 s")
	}
	readSeqs(t, c, n)
	if f, ok := <-c.Pushes(); ok {
		t.Fatalf("after the last push and the close, Pushes gave %+v; want it closed", f)
	}
	if got := c.CloseStatus(); got != websocket.StatusGoingAway {
		t.Fatalf("close status %v, want %v", got, websocket.StatusGoingAway)
	}
}

// Close returns while pushes wait unread, and ends Pushes (goleak in TestMain checks that the
// connection's goroutines end with it).
func TestCloseWithUnreadPushes(t *testing.T) {
	const n = 100
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, pushServer(t, n, false), "token", &client.Options{SkipSync: true})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	readSeqs(t, c, 1) // the server is pushing; leave the rest unread
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return within 30 s with pushes unread")
	}
	for range c.Pushes() { // ends: Close closed it
	}
}
