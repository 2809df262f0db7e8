// Package readstate coalesces read-cursor moves. A client may report its read position many times
// a second while scrolling; the coalescer keeps only the highest position per (user, conversation)
// in memory and writes what changed to the store as one bulk of $max updates per window, and at
// once when asked (a disconnect, a shutdown). Store writes therefore grow with users x
// conversations x windows, not with read frames.
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

// Store is what the coalescer writes to.
type Store interface {
	AdvanceCursors(ctx context.Context, cursors []storage.Cursor) error
}

type key struct{ user, conversation string }

// Coalescer absorbs cursor moves and flushes them periodically. It is safe for concurrent use.
type Coalescer struct {
	store  Store
	window time.Duration
	log    zerolog.Logger

	mu      sync.Mutex
	pending map[key]storage.Cursor
	flushMu sync.Mutex // one bulk write at a time, so an older write never lands after a newer one

	stop chan struct{}
	done chan struct{}
}

// New returns a coalescer writing to store every window (0 means DefaultWindow). Call Close to
// stop it; Close writes what is pending.
func New(store Store, window time.Duration, log zerolog.Logger) *Coalescer {
	if window <= 0 {
		window = DefaultWindow
	}
	c := &Coalescer{
		store:   store,
		window:  window,
		log:     log.With().Str("component", "readstate").Logger(),
		pending: make(map[key]storage.Cursor),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go c.run()
	return c
}

// Advance records that a user has read up to cur.ReadSeq; a lower value than one already pending
// is ignored, so cursors only move forward.
func (c *Coalescer) Advance(cur storage.Cursor) {
	k := key{cur.UserID, cur.ConversationID}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.pending[k]; ok && old.ReadSeq >= cur.ReadSeq {
		return
	}
	c.pending[k] = cur
}

// Flush writes everything pending now. On failure the moves are kept for the next attempt.
func (c *Coalescer) Flush(ctx context.Context) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.mu.Unlock()
		return nil
	}
	batch := make([]storage.Cursor, 0, len(c.pending))
	for _, cur := range c.pending {
		batch = append(batch, cur)
	}
	c.pending = make(map[key]storage.Cursor)
	c.mu.Unlock()

	if err := c.store.AdvanceCursors(ctx, batch); err != nil {
		for _, cur := range batch {
			c.Advance(cur)
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
