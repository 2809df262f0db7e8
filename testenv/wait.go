package testenv

import (
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
)

// Messages reads pushes from c until it has n message frames of conversation convID, skipping
// every other push, and fails the test after timeout.
func Messages(t testing.TB, c *client.Conn, convID string, n int, timeout time.Duration) []protocol.ServerFrame {
	t.Helper()
	var got []protocol.ServerFrame
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case f, ok := <-c.Pushes():
			if !ok {
				t.Fatalf("connection closed after %d of %d messages: %v", len(got), n, c.Err())
			}
			if f.Type == protocol.TypeMessage && f.ConversationID == convID {
				got = append(got, f)
			}
		case <-deadline:
			t.Fatalf("got %d of %d messages in %s", len(got), n, timeout)
		}
	}
	return got
}

// Push reads pushes from c until one satisfies match, and fails the test after timeout.
func Push(t testing.TB, c *client.Conn, timeout time.Duration, match func(protocol.ServerFrame) bool) protocol.ServerFrame {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case f, ok := <-c.Pushes():
			if !ok {
				t.Fatalf("connection closed while waiting for a push: %v", c.Err())
			}
			if match(f) {
				return f
			}
		case <-deadline:
			t.Fatalf("no matching push in %s", timeout)
		}
	}
}

// Eventually polls cond every interval until it is true, and fails the test after timeout.
func Eventually(t testing.TB, timeout, interval time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}
