package testenv

import (
	"fmt"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv/poll"
)

// ErrGiveUp marks a check's error after which waiting longer is pointless: Poll and CheckFor
// stop at once with it. It is poll.ErrGiveUp, so either name matches it.
var ErrGiveUp = poll.ErrGiveUp

// Poll is poll.Until: it calls check every interval until it returns nil, returns check's last
// error once timeout has passed, and returns at once an error that wraps ErrGiveUp. Any goroutine
// may call it.
func Poll(timeout, interval time.Duration, check func() error) error {
	return poll.Until(timeout, interval, check)
}

// CheckFor is poll.CheckFor: it polls check like Poll and fails the test with check's last error
// if it does not return nil within timeout. Call it from the test's goroutine only.
func CheckFor(t testing.TB, timeout, interval time.Duration, check func() error) {
	t.Helper()
	poll.CheckFor(t, timeout, interval, check)
}

// ReadMessages reads pushes from c until it has n message frames of conversation convID,
// skipping every other push. It returns the messages it got and an error saying how far it got
// when the connection closes or timeout passes first. It does not touch a testing.T, so reader
// goroutines call it and hand the error to the test's goroutine.
func ReadMessages(c *client.Conn, convID string, n int, timeout time.Duration) ([]protocol.ServerFrame, error) {
	var got []protocol.ServerFrame
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for len(got) < n {
		select {
		case f, ok := <-c.Pushes():
			if !ok {
				return got, fmt.Errorf("connection closed after %d of %d messages of %s: %v", len(got), n, convID, c.Err())
			}
			if f.Type == protocol.TypeMessage && f.ConversationID == convID {
				got = append(got, f)
			}
		case <-deadline.C:
			return got, fmt.Errorf("got %d of %d messages of %s in %s", len(got), n, convID, timeout)
		}
	}
	return got, nil
}

// Messages is ReadMessages that fails the test on error. Call it from the test's goroutine only;
// other goroutines call ReadMessages.
func Messages(t testing.TB, c *client.Conn, convID string, n int, timeout time.Duration) []protocol.ServerFrame {
	t.Helper()
	got, err := ReadMessages(c, convID, n, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// ReadPush reads pushes from c until one satisfies match and returns it, or returns an error
// when the connection closes or timeout passes first. Any goroutine may call it.
func ReadPush(c *client.Conn, timeout time.Duration, match func(protocol.ServerFrame) bool) (protocol.ServerFrame, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case f, ok := <-c.Pushes():
			if !ok {
				return protocol.ServerFrame{}, fmt.Errorf("connection closed while waiting for a push: %v", c.Err())
			}
			if match(f) {
				return f, nil
			}
		case <-deadline.C:
			return protocol.ServerFrame{}, fmt.Errorf("no matching push in %s", timeout)
		}
	}
}

// Push is ReadPush that fails the test on error. Call it from the test's goroutine only.
func Push(t testing.TB, c *client.Conn, timeout time.Duration, match func(protocol.ServerFrame) bool) protocol.ServerFrame {
	t.Helper()
	f, err := ReadPush(c, timeout, match)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
