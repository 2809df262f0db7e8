// Package readstate coalesces read-cursor moves (and delivered-cursor moves, kept beside them). A client may report its read position many times
// a second while scrolling; the coalescer keeps only the highest position per (user, conversation)
// in memory and writes what changed to the store as one bulk of $max updates per window, and at
// once when asked: one user's moves when their last connection closes, one conversation's before
// its receipts are counted, everything at shutdown. Readers of the store apply Pending on top.
// Store writes therefore grow with users x conversations x windows, not with read frames.
package readstate

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/storage"
)

// DefaultWindow is how long cursor moves are absorbed before they are written: a second keeps a
// scrolling reader to one write a second while a crash loses at most a second of read state.
const DefaultWindow = time.Second

// flushTimeout bounds one bulk write.
const flushTimeout = 10 * time.Second

// Config tunes a Coalescer. Zero fields take their defaults.
type Config struct {
	// Window is how long moves are absorbed before they are written; zero (or less) means
	// DefaultWindow.
	Window time.Duration
	// Metrics records moves, writes and flushes; nil records nothing.
	Metrics *Metrics
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{Window: DefaultWindow}
}

// Store is what the coalescer writes to.
type Store interface {
	AdvanceCursors(ctx context.Context, cursors []storage.Cursor) error
}

type key struct{ user, conversation string }

// Coalescer absorbs cursor moves and flushes them periodically. It is safe for concurrent use.
type Coalescer struct {
	store   Store
	window  time.Duration
	log     zerolog.Logger
	metrics *Metrics

	mu      sync.Mutex
	pending map[key]storage.Cursor
	// writing is the batch being written: still pending to readers (Pending) until the store
	// has it, or a user who reconnects during the write would find their read in neither place.
	writing []storage.Cursor
	flushMu sync.Mutex // one bulk write at a time, so an older write never lands after a newer one

	stop chan struct{}
	done chan struct{}
}

// New returns a coalescer writing to store every cfg.Window. Call Close to stop it; Close writes
// what is pending.
func New(store Store, cfg Config, log zerolog.Logger) *Coalescer {
	window := cfg.Window
	if window <= 0 {
		window = DefaultWindow
	}
	c := &Coalescer{
		store:   store,
		window:  window,
		log:     log.With().Str("component", "readstate").Logger(),
		metrics: cfg.Metrics,
		pending: make(map[key]storage.Cursor),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go c.run()
	return c
}

// Advance records that a user has read up to cur.ReadSeq, or received up to cur.DeliveredSeq; a
// value not above one already pending is ignored, so cursors only move forward.
func (c *Coalescer) Advance(cur storage.Cursor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.advance(cur) {
		c.metrics.moved()
	}
}

// advance is Advance with c.mu held; it reports whether cur was taken, rather than dropped behind
// a move already pending. A move of one position keeps the other's pending move.
func (c *Coalescer) advance(cur storage.Cursor) bool {
	k := key{cur.UserID, cur.ConversationID}
	old, ok := c.pending[k]
	if ok && old.ReadSeq >= cur.ReadSeq && old.DeliveredSeq >= cur.DeliveredSeq {
		return false
	}
	if ok {
		cur.ReadSeq, cur.DeliveredSeq = max(cur.ReadSeq, old.ReadSeq), max(cur.DeliveredSeq, old.DeliveredSeq)
	}
	c.pending[k] = cur
	return true
}

// Flush writes everything pending now. On failure the moves are kept for the next attempt.
func (c *Coalescer) Flush(ctx context.Context) error {
	return c.flush(ctx, func(key) bool { return true })
}

// FlushUser writes one user's pending moves (their last connection here closed, so their next
// one may open on another node) and nobody else's.
func (c *Coalescer) FlushUser(ctx context.Context, userID string) error {
	return c.flush(ctx, func(k key) bool { return k.user == userID })
}

// FlushConversation writes the pending moves in one conversation (its receipts are about to be
// counted from the store) and nobody else's.
func (c *Coalescer) FlushConversation(ctx context.Context, conversationID string) error {
	return c.flush(ctx, func(k key) bool { return k.conversation == conversationID })
}

// Pending returns a user's moves not yet written, so a reader of the store can apply them on top
// (read-through) without writing anything. A conversation may appear twice (a move made while an
// older one is being written): take the highest.
func (c *Coalescer) Pending(userID string) []storage.Cursor {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []storage.Cursor
	for k, cur := range c.pending {
		if k.user == userID {
			out = append(out, cur)
		}
	}
	for _, cur := range c.writing {
		if cur.UserID == userID {
			out = append(out, cur)
		}
	}
	return out
}

// flush writes the pending moves whose key matches.
func (c *Coalescer) flush(ctx context.Context, match func(key) bool) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	var batch []storage.Cursor
	for k, cur := range c.pending {
		if match(k) {
			batch = append(batch, cur)
			delete(c.pending, k)
		}
	}
	c.writing = batch
	c.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	start := time.Now()
	err := c.store.AdvanceCursors(ctx, batch)
	c.metrics.flushed(len(batch), start, err)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writing = nil
	if err != nil {
		for _, cur := range batch { // kept for the next attempt
			c.advance(cur)
		}
		return fmt.Errorf("flush %d read cursors: %w", len(batch), err)
	}
	return nil
}

func (c *Coalescer) run() {
	defer close(c.done)
	t := time.NewTicker(c.window)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
			if err := c.Flush(ctx); err != nil {
				c.log.Warn().Err(err).Msg("flush read cursors; will retry")
			}
			cancel()
		case <-c.stop:
			return
		}
	}
}

// Close stops the periodic flush and writes what is pending.
func (c *Coalescer) Close(ctx context.Context) error {
	close(c.stop)
	<-c.done
	return c.Flush(ctx)
}
