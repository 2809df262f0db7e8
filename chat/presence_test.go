package chat

import (
	"context"
	"slices"
	"testing"
	"time"
)

// within fails the test if fn has not returned after d, saying what it was doing.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
	}
}

// A store that has fallen behind on presence records must not hold up anybody's connect or
// disconnect: thousands of them while the presence writer is stuck all return, and each user's
// changes meanwhile are written as one record, their last, all of them in one batch.
func TestPresenceNeverHoldsUpConnects(t *testing.T) {
	ts := newTestService(t)
	release := make(chan struct{})
	ts.store.beforePresence = func(ctx context.Context) {
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	const cycles = 2000 // 10,000 records queued: more than any fixed queue of the old writer
	within(t, 30*time.Second, "connecting and disconnecting while the presence writer is stuck", func() {
		for range cycles {
			for _, u := range users {
				c := &fakeConn{user: u}
				if _, err := ts.svc.Open(ts.ctx, c, nil); err != nil {
					t.Errorf("open %s: %v", u, err)
					return
				}
				ts.svc.Close(c)
			}
		}
	})
	close(release)
	within(t, 30*time.Second, "writing the waiting presence records", ts.svc.awaitPresence)

	ts.store.mu.Lock()
	writes := slices.Clone(ts.store.presenceWrites)
	batches := slices.Clone(ts.store.presenceBatches)
	ts.store.mu.Unlock()
	// The first batch was taken before the writer got stuck; after it, one record per user, the
	// last, in one batch.
	if len(batches) != 2 {
		t.Fatalf("the presence writer wrote %d batches (%v), want 2: the one it was stuck on and the rest at once", len(batches), batches)
	}
	if max := batches[0] + len(users); len(writes) > max {
		t.Fatalf("%d presence records written for %d users, want at most %d: %q", len(writes), len(users), max, writes)
	}
	for _, u := range users {
		if !slices.Contains(writes, "offline "+u) {
			t.Errorf("%s's last change, offline, was not written: %q", u, writes)
		}
	}
}

// A batch of presence records the store failed is written again: a user whose first connection's
// record failed twice is recorded online once the store answers.
func TestPresenceRetriedAfterAStoreError(t *testing.T) {
	ts := newTestService(t)
	ts.store.mu.Lock()
	ts.store.presenceFailures = 2
	ts.store.mu.Unlock()
	ts.open("alice")
	within(t, 30*time.Second, "writing presence after two failures", ts.svc.awaitPresence)

	ts.store.mu.Lock()
	online, left := ts.store.onlineNodesLocked("alice"), ts.store.presenceFailures
	ts.store.mu.Unlock()
	if left != 0 || len(online) == 0 {
		t.Fatalf("alice is connected; after the store failed %d of 2 batches she is online on %v", 2-left, online)
	}
}

// Stop gives up on a store that does not answer once its context ends, and a connection that
// closes after it (a session still ending at shutdown) neither panics nor waits.
func TestStopDoesNotWaitForAStuckStore(t *testing.T) {
	ts := newTestService(t)
	ts.store.beforePresence = func(ctx context.Context) { <-ctx.Done() }
	c := &fakeConn{user: "alice"}
	if _, err := ts.svc.Open(ts.ctx, c, nil); err != nil {
		t.Fatalf("open alice: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	within(t, 10*time.Second, "Stop with the store stuck", func() { ts.svc.Stop(ctx) })
	within(t, 10*time.Second, "a close after Stop", func() { ts.svc.Close(c) })
}

// A user's connection that closes while their next one opens must leave them online: the
// disconnect's offline record is queued before the reconnect's online one however long the
// disconnect's own store work takes.
func TestReconnectDuringDisconnectStaysOnline(t *testing.T) {
	ts := newTestService(t)
	c1 := ts.open("alice")
	flushing, release := make(chan struct{}), make(chan struct{})
	ts.reads.beforeUserFlush = func() {
		close(flushing)
		<-release
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		ts.svc.Close(c1)
	}()
	<-flushing // the disconnect is writing alice's cursors
	c2 := &fakeConn{user: "alice"}
	if _, err := ts.svc.Open(ts.ctx, c2, nil); err != nil {
		t.Fatalf("reopen alice: %v", err)
	}
	ts.svc.awaitPresence()
	close(release)
	<-closed
	ts.reads.beforeUserFlush = nil
	ts.svc.awaitPresence()

	ts.store.mu.Lock()
	online := ts.store.onlineNodesLocked("alice")
	writes := slices.Clone(ts.store.presenceWrites)
	ts.store.mu.Unlock()
	if len(online) == 0 {
		t.Fatalf("alice is connected but recorded offline; presence writes %q", writes)
	}
	ts.svc.Close(c2)
}

// awaitPresence returns once the presence records queued before it are written (and their
// events published), so a test's next step sees them done.
func (s *Service) awaitPresence() {
	<-s.queue.awaitIdle()
}
