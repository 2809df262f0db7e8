package chat

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// sharedReads merges identical store reads that overlap in time, so that when the members of one
// conversation reconnect at once (their node died) their catch-up and first history page cost a
// store read or two, not one per member.
//
// A caller only ever shares a read that has not begun when it asks. One that arrives while the
// read of its key is running waits for that read to end and shares the next one, which begins
// then for everyone who arrived meanwhile. So each caller gets what a read of its own would have
// returned at some moment of its call. Sharing a read that had begun already would not be safe:
// for a sync it may predate a message whose live push the caller never got (it joined the
// conversation after the push), and the replay would have a gap. A key thus has at most one read
// running and one waiting: N identical callers cost at most two reads, and callers that keep
// coming cost one read per read duration. A read that waits to be admitted (for a slot of a
// bounded pool, see admit) has not begun, so in a queue every caller of a key shares one.
//
// The read runs in its own goroutine under its own timeout, not under any caller's context: a
// caller whose context ends stops waiting and the others keep the read. When every caller of a
// read has gone its context is cancelled (and a read not started yet never starts), so a reconnect
// storm of clients that gave up leaves no store work behind. The goroutine ends with its reads.
//
// Callers share the value: they must not modify it (copy first).
type sharedReads[K comparable, V any] struct {
	// timeout bounds one read, from its start, admission included.
	timeout time.Duration
	// admit, if set, is waited for before each read begins, and release called after it.
	admit func(ctx context.Context) (release func(), err error)

	mu   sync.Mutex
	keys map[K]*keyReads[V]
}

// keyReads are the reads of one key: the one running and the one that starts after it.
type keyReads[V any] struct {
	running, next *sharedRead[V]
}

// sharedRead is one read and its outcome, final once done is closed.
type sharedRead[V any] struct {
	done chan struct{}
	val  V
	err  error

	// Under sharedReads.mu: waiting counts the callers still waiting for the read, cancel (set
	// when the read starts) ends it, and sealed says no caller may join it any more: it was
	// admitted and its store read began, or everyone who wanted it left and it was cancelled.
	waiting int
	cancel  context.CancelFunc
	sealed  bool
}

// newSharedReads returns reads that each take at most timeout, admitted by admit (nil: at once).
func newSharedReads[K comparable, V any](timeout time.Duration, admit func(context.Context) (func(), error)) *sharedReads[K, V] {
	return &sharedReads[K, V]{timeout: timeout, admit: admit, keys: make(map[K]*keyReads[V])}
}

// do returns the outcome of read for key, run once for all the callers of key that asked before
// it began. read must depend on key only: whichever caller's read runs answers everyone. shared
// reports whether the caller got a read it did not start itself (one store read saved). When ctx
// ends first, do returns ctx's error at once.
func (g *sharedReads[K, V]) do(ctx context.Context, key K, read func(context.Context) (V, error)) (v V, shared bool, err error) {
	r := &sharedRead[V]{done: make(chan struct{})}
	var readCtx context.Context // set when this call starts the read
	g.mu.Lock()
	kr := g.keys[key]
	switch {
	case kr == nil: // nothing running: start now
		kr = &keyReads[V]{running: r}
		g.keys[key] = kr
		readCtx = g.startLocked(r)
	case !kr.running.sealed: // still waiting to be admitted: share it
		r, shared = kr.running, true
	case kr.next != nil: // others already wait for the next read
		r, shared = kr.next, true
	default: // a read began before this call: wait for the next
		kr.next = r
	}
	r.waiting++
	g.mu.Unlock()
	if readCtx != nil {
		go g.run(readCtx, key, kr, r, read)
	}

	select {
	case <-r.done:
		return r.val, shared, r.err
	case <-ctx.Done():
		g.mu.Lock()
		if r.waiting--; r.waiting == 0 && r.cancel != nil {
			r.sealed = true
			r.cancel() // nobody wants it any more
		}
		g.mu.Unlock()
		var zero V
		return zero, false, fmt.Errorf("wait for a store read: %w", ctx.Err())
	}
}

// startLocked gives a read its context, from now.
func (g *sharedReads[K, V]) startLocked(r *sharedRead[V]) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	r.cancel = cancel
	return ctx
}

// run reads for key, and again for the callers who arrived meanwhile, until none did.
func (g *sharedReads[K, V]) run(ctx context.Context, key K, kr *keyReads[V], r *sharedRead[V], read func(context.Context) (V, error)) {
	for r != nil {
		r.val, r.err = g.readOnce(ctx, r, read)
		close(r.done)
		g.mu.Lock()
		r.cancel()
		r, kr.next = kr.next, nil
		if r != nil && r.waiting == 0 {
			r = nil // everyone who asked for it has gone
		}
		kr.running = r
		if r == nil {
			delete(g.keys, key)
		} else {
			ctx = g.startLocked(r)
		}
		g.mu.Unlock()
	}
}

// readOnce admits one read and runs it.
func (g *sharedReads[K, V]) readOnce(ctx context.Context, r *sharedRead[V], read func(context.Context) (V, error)) (V, error) {
	if g.admit != nil {
		release, err := g.admit(ctx)
		if err != nil {
			var zero V
			return zero, err
		}
		defer release()
	}
	g.mu.Lock()
	r.sealed = true // from here on, callers wait for the next read
	g.mu.Unlock()
	if err := ctx.Err(); err != nil { // abandoned while it waited
		var zero V
		return zero, err
	}
	return read(ctx)
}

// syncReadSlot waits, as long as ctx allows, for one of the node's MaxConcurrentSyncReads slots
// for the store reads of connecting and syncing sessions; release gives it back.
func (s *messaging) syncReadSlot(ctx context.Context) (release func(), err error) {
	start := time.Now()
	select {
	case s.syncReads <- struct{}{}:
		s.cfg.Metrics.waitedForSyncRead(start)
		return func() { <-s.syncReads }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a sync read slot: %w", ctx.Err())
	}
}

// syncRange reads the messages from..to of a conversation for a sync, merged with identical
// syncs (see sharedReads) and in a sync read slot. The slice is shared: read it only.
func (s *messaging) syncRange(ctx context.Context, convID string, from, to int64) ([]storage.Message, error) {
	msgs, shared, err := s.syncRanges.do(ctx, messageRange{convID, from, to}, func(ctx context.Context) ([]storage.Message, error) {
		return s.store.MessageRange(ctx, convID, from, to)
	})
	if shared {
		s.cfg.Metrics.sharedRead()
	}
	return msgs, err
}

// admitSyncRange takes a sync read slot for a shared sync read, which waits under its own timeout.
func (s *messaging) admitSyncRange(ctx context.Context) (release func(), err error) {
	release, err = s.syncReadSlot(ctx)
	if err != nil {
		// Whoever still waits for the read has waited its whole timeout: the store is swamped.
		return nil, protocol.Refuse(protocol.ErrUnavailable, "the store is busy with reconnecting clients; retry")
	}
	return release, nil
}

// pageMessages reads the messages from..to of a conversation for a history page, merged with
// identical pages. The slice is shared: read it only.
func (s *messaging) pageMessages(ctx context.Context, convID string, from, to int64) ([]storage.Message, error) {
	msgs, shared, err := s.pageRanges.do(ctx, messageRange{convID, from, to}, func(ctx context.Context) ([]storage.Message, error) {
		return s.store.MessageRange(ctx, convID, from, to)
	})
	if shared {
		s.cfg.Metrics.sharedRead()
	}
	return msgs, err
}

// conversation reads a conversation, merged with identical look-ups. Its Members are shared:
// read them only.
func (s *messaging) conversation(ctx context.Context, convID string) (storage.Conversation, error) {
	conv, shared, err := s.convs.do(ctx, convID, func(ctx context.Context) (storage.Conversation, error) {
		return s.store.Conversation(ctx, convID)
	})
	if shared {
		s.cfg.Metrics.sharedRead()
	}
	return conv, err
}
