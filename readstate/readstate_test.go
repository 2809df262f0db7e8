package readstate_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/readstate"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// TestMain fails the package if a test leaves a coalescer's flush loop running.
func TestMain(m *testing.M) { testenv.VerifyTestMain(m) }

// noWindow is a window no test outlasts: the ticker never flushes, so only the test's own calls
// write.
const noWindow = time.Hour

// shortWindow is a window tests wait out when they mean the ticker to write.
const shortWindow = 20 * time.Millisecond

var errStoreDown = errors.New("store down")

// refusal says which writes the fake store fails.
type refusal int

const (
	refuseNone   refusal = iota
	refuseAll            // every write fails
	refuseWindow         // the ticker's writes fail; the test's own (testContext) succeed
)

// write is one AdvanceCursors call as the store saw it.
type write struct {
	byTest  bool     // made with testContext, not by the window's ticker
	cursors []string // as cursorNames gives them
	err     error
}

func (w write) String() string {
	by := "ticker"
	if w.byTest {
		by = "test"
	}
	if w.err != nil {
		return fmt.Sprintf("%s wrote %v: %v", by, w.cursors, w.err)
	}
	return fmt.Sprintf("%s wrote %v", by, w.cursors)
}

// fakeStore records every write. It can refuse writes, and hold them in flight: while hold is
// set, a write reports on held and returns only once hold is closed.
type fakeStore struct {
	mu     sync.Mutex
	writes []write
	refuse refusal
	hold   chan struct{}
	held   chan struct{}
}

func (s *fakeStore) AdvanceCursors(ctx context.Context, cursors []storage.Cursor) error {
	byTest := ctx.Value(fromTest{}) != nil
	s.mu.Lock()
	hold, held := s.hold, s.held
	var err error
	if s.refuse == refuseAll || s.refuse == refuseWindow && !byTest {
		err = errStoreDown
	}
	s.mu.Unlock()
	if hold != nil {
		held <- struct{}{}
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Recorded when it returns: that is when the store has the cursors.
	s.writes = append(s.writes, write{byTest: byTest, cursors: cursorNames(cursors), err: err})
	return err
}

func (s *fakeStore) setRefuse(r refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = r
}

// holdWrites makes the next writes wait until the returned release is called; held receives one
// value as each write starts waiting.
func (s *fakeStore) holdWrites() (held <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold, s.held = make(chan struct{}), make(chan struct{}, 1)
	hold := s.hold
	return s.held, sync.OnceFunc(func() { close(hold) })
}

func (s *fakeStore) snapshot() []write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.writes)
}

// written is every cursor the store accepted (from writes by the test, or by the ticker when
// byTest is false), sorted.
func (s *fakeStore) written(byTest bool) []string {
	var out []string
	for _, w := range s.snapshot() {
		if w.err == nil && w.byTest == byTest {
			out = append(out, w.cursors...)
		}
	}
	slices.Sort(out)
	return out
}

// fromTest marks a context as the test's, so the fake store tells the test's writes from the
// ticker's.
type fromTest struct{}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), fromTest{}, true), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newCoalescer starts a coalescer on store and closes it when the test ends.
func newCoalescer(t *testing.T, store readstate.Store, window time.Duration) *readstate.Coalescer {
	t.Helper()
	c := readstate.New(store, readstate.Config{Window: window}, zerolog.Nop())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx) // a test that refuses writes may leave moves the store never takes
	})
	return c
}

func cursor(user, conversation string, seq int64) storage.Cursor {
	return storage.Cursor{UserID: user, ConversationID: conversation, ReadSeq: seq, UpdatedAt: time.Unix(seq, 0).UTC()}
}

// cursorNames names cursors user/conversation@seq, sorted, so a failure reads at a glance.
func cursorNames(cursors []storage.Cursor) []string {
	out := make([]string, 0, len(cursors))
	for _, c := range cursors {
		out = append(out, fmt.Sprintf("%s/%s@%d", c.UserID, c.ConversationID, c.ReadSeq))
	}
	slices.Sort(out)
	return out
}

func pending(c *readstate.Coalescer, user string) []string { return cursorNames(c.Pending(user)) }

func TestAdvanceCoalescesToHighestSeq(t *testing.T) {
	store := &fakeStore{}
	c := newCoalescer(t, store, noWindow)

	// Four scrolling devices of one user report out of order, concurrently.
	var wg sync.WaitGroup
	for d := range 4 {
		wg.Go(func() {
			for i := range 100 {
				c.Advance(cursor("alice", "c1", int64((i*4+d)%100+1)))
			}
		})
	}
	wg.Wait()
	c.Advance(cursor("alice", "c1", 50)) // a stale device, after the highest

	if got, want := pending(c, "alice"), []string{"alice/c1@100"}; !slices.Equal(got, want) {
		t.Fatalf("Pending(alice) = %v, want %v", got, want)
	}
	if err := c.Flush(testContext(t)); err != nil {
		t.Fatalf("flush: %v", err)
	}
	writes := store.snapshot()
	if len(writes) != 1 || !slices.Equal(writes[0].cursors, []string{"alice/c1@100"}) {
		t.Fatalf("writes = %v, want one write of [alice/c1@100]", writes)
	}
	if got := pending(c, "alice"); len(got) != 0 {
		t.Fatalf("Pending(alice) after the write = %v, want none", got)
	}
}

// TestReadAndDeliveredMovesKeepEachOther: a delivered move after a read move (and the other way
// round) keeps the pending value of both, each at its highest.
func TestReadAndDeliveredMovesKeepEachOther(t *testing.T) {
	c := newCoalescer(t, &fakeStore{}, noWindow)
	c.Advance(storage.Cursor{UserID: "alice", ConversationID: "c1", ReadSeq: 5})
	c.Advance(storage.Cursor{UserID: "alice", ConversationID: "c1", DeliveredSeq: 9})
	c.Advance(storage.Cursor{UserID: "alice", ConversationID: "c1", ReadSeq: 3, DeliveredSeq: 7}) // late: changes nothing
	c.Advance(storage.Cursor{UserID: "alice", ConversationID: "c1", ReadSeq: 6})
	got := c.Pending("alice")
	if len(got) != 1 || got[0].ReadSeq != 6 || got[0].DeliveredSeq != 9 {
		t.Fatalf("Pending(alice) = %+v; want one cursor read 6, delivered 9", got)
	}
}

func TestFlushOneUserOrConversation(t *testing.T) {
	all := []storage.Cursor{cursor("alice", "c1", 3), cursor("alice", "c2", 4), cursor("bob", "c1", 5), cursor("bob", "c2", 6)}
	for _, tc := range []struct {
		name    string
		flush   func(context.Context, *readstate.Coalescer) error
		flushed []string // written by the call
		left    []string // still pending after it, for the next window
	}{
		{
			name:    "FlushUser",
			flush:   func(ctx context.Context, c *readstate.Coalescer) error { return c.FlushUser(ctx, "alice") },
			flushed: []string{"alice/c1@3", "alice/c2@4"},
			left:    []string{"bob/c1@5", "bob/c2@6"},
		},
		{
			name:    "FlushConversation",
			flush:   func(ctx context.Context, c *readstate.Coalescer) error { return c.FlushConversation(ctx, "c1") },
			flushed: []string{"alice/c1@3", "bob/c1@5"},
			left:    []string{"alice/c2@4", "bob/c2@6"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The window ticks on the real clock and may fire between Advance and the flush under
			// test. The store refuses the ticker's writes until the test has looked, which by the
			// coalescer's contract leaves the moves pending, so what the call writes and what it
			// leaves do not depend on when the ticks land.
			store := &fakeStore{refuse: refuseWindow}
			c := newCoalescer(t, store, shortWindow)
			for _, cur := range all {
				c.Advance(cur)
			}

			if err := tc.flush(testContext(t), c); err != nil {
				t.Fatalf("flush: %v", err)
			}
			if got := store.written(true); !slices.Equal(got, tc.flushed) {
				t.Fatalf("the call wrote %v, want %v", got, tc.flushed)
			}
			for _, user := range []string{"alice", "bob"} {
				want := slices.DeleteFunc(slices.Clone(tc.left), func(s string) bool { return !strings.HasPrefix(s, user+"/") })
				if got := pending(c, user); !slices.Equal(got, want) {
					t.Fatalf("Pending(%s) after the call = %v, want %v", user, got, want)
				}
			}

			store.setRefuse(refuseNone)
			testenv.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
				if got := store.written(false); !slices.Equal(got, tc.left) {
					return fmt.Errorf("the window wrote %v, want %v", got, tc.left)
				}
				if a, b := pending(c, "alice"), pending(c, "bob"); len(a)+len(b) != 0 {
					return fmt.Errorf("still pending: alice %v, bob %v", a, b)
				}
				return nil
			})
		})
	}
}

func TestPendingIncludesWriteInFlight(t *testing.T) {
	store := &fakeStore{}
	c := newCoalescer(t, store, noWindow)
	c.Advance(cursor("alice", "c1", 7))
	c.Advance(cursor("bob", "c1", 8))

	held, release := store.holdWrites()
	t.Cleanup(release) // before the coalescer's Close, which would wait for the write
	ctx := testContext(t)
	flushed := make(chan error, 1)
	go func() { flushed <- c.Flush(ctx) }()
	select {
	case <-held:
	case <-time.After(2 * time.Second):
		t.Fatal("Flush never wrote to the store")
	}

	// A reconnecting user reads the store, which does not have the batch yet, and Pending on top.
	if got, want := pending(c, "alice"), []string{"alice/c1@7"}; !slices.Equal(got, want) {
		t.Fatalf("Pending(alice) during the write = %v, want %v", got, want)
	}
	if got, want := pending(c, "bob"), []string{"bob/c1@8"}; !slices.Equal(got, want) {
		t.Fatalf("Pending(bob) during the write = %v, want %v", got, want)
	}

	release()
	if err := <-flushed; err != nil {
		t.Fatalf("flush: %v", err)
	}
	if got := pending(c, "alice"); len(got) != 0 {
		t.Fatalf("Pending(alice) after the write = %v, want none", got)
	}
	if got, want := store.written(true), []string{"alice/c1@7", "bob/c1@8"}; !slices.Equal(got, want) {
		t.Fatalf("written %v, want %v", got, want)
	}
}

func TestFailedWriteStaysPending(t *testing.T) {
	store := &fakeStore{refuse: refuseAll}
	c := newCoalescer(t, store, shortWindow)
	c.Advance(cursor("alice", "c1", 3))

	// Whether or not a tick tried first, the move is pending again when Flush takes its turn.
	if err := c.Flush(testContext(t)); !errors.Is(err, errStoreDown) {
		t.Fatalf("flush with the store down: err = %v, want %v", err, errStoreDown)
	}
	if got, want := pending(c, "alice"), []string{"alice/c1@3"}; !slices.Equal(got, want) {
		t.Fatalf("Pending(alice) after a failed write = %v, want %v", got, want)
	}

	store.setRefuse(refuseNone)
	testenv.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		if got, want := store.written(false), []string{"alice/c1@3"}; !slices.Equal(got, want) {
			return fmt.Errorf("the window wrote %v, want %v (all writes: %v)", got, want, store.snapshot())
		}
		if got := pending(c, "alice"); len(got) != 0 {
			return fmt.Errorf("Pending(alice) = %v after the window wrote it", got)
		}
		return nil
	})
}

func TestCloseWritesPendingAndStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	store := &fakeStore{}
	c := readstate.New(store, readstate.Config{Window: noWindow}, zerolog.Nop())
	c.Advance(cursor("alice", "c1", 1))
	c.Advance(cursor("bob", "c2", 2))

	if err := c.Close(testContext(t)); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got, want := store.written(true), []string{"alice/c1@1", "bob/c2@2"}; !slices.Equal(got, want) {
		t.Fatalf("Close wrote %v, want %v", got, want)
	}
}
