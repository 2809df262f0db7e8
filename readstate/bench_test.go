package readstate_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/readstate"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// The scenario: benchReaders users scroll through one conversation each, every read frame moving
// their cursor one message further, benchFramesPerWindow frames per coalescing window (ten frames a
// second per reader with the default one-second window). The real store takes the writes.
const (
	benchReaders         = 200
	benchFramesPerWindow = 10 * benchReaders
)

// countingStore passes writes to the real store and counts them.
type countingStore struct {
	store   *storage.Store
	flushes atomic.Int64 // AdvanceCursors calls, each one bulk write (in commands of up to 64)
	cursors atomic.Int64 // cursor documents written
}

func (s *countingStore) AdvanceCursors(ctx context.Context, cursors []storage.Cursor) error {
	s.flushes.Add(1)
	s.cursors.Add(int64(len(cursors)))
	return s.store.AdvanceCursors(ctx, cursors)
}

// BenchmarkCoalescedReads measures one read frame through the coalescer, the store writes of its
// window included, and reports how many frames each cursor write and each bulk write absorbs.
func BenchmarkCoalescedReads(b *testing.B) {
	store := benchStore(b)
	// A window far longer than the benchmark: the benchmark ends each window itself by flushing, so
	// the figures do not depend on how fast the machine runs the loop.
	c := readstate.New(store, readstate.Config{Window: time.Hour}, zerolog.Nop())
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx := context.Background()
	frames := 0
	b.ReportAllocs()
	for b.Loop() {
		c.Advance(benchCursor(frames))
		frames++
		if frames%benchFramesPerWindow == 0 {
			if err := c.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := c.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	reportWrites(b, store, frames)
}

// BenchmarkUncoalescedReads is the baseline: every read frame is written at once.
func BenchmarkUncoalescedReads(b *testing.B) {
	store := benchStore(b)
	ctx := context.Background()
	frames := 0
	b.ReportAllocs()
	for b.Loop() {
		if err := store.AdvanceCursors(ctx, []storage.Cursor{benchCursor(frames)}); err != nil {
			b.Fatal(err)
		}
		frames++
	}
	reportWrites(b, store, frames)
}

// benchStore is a fresh store holding the readers' conversations, and so their cursors.
func benchStore(b *testing.B) *countingStore {
	s := testenv.Store(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for r := range benchReaders {
		c := benchCursor(r)
		if _, err := s.EnsureConversation(ctx, storage.Conversation{ID: c.ConversationID, Kind: storage.KindGroup,
			Members: []string{c.UserID}, CreatedBy: c.UserID, CreatedAt: time.Now().UTC()}); err != nil {
			b.Fatalf("create conversation: %v", err)
		}
	}
	return &countingStore{store: s}
}

// benchCursor is read frame i: reader i%benchReaders moves one message further.
func benchCursor(i int) storage.Cursor {
	reader := i % benchReaders
	return storage.Cursor{UserID: fmt.Sprintf("reader%03d", reader), ConversationID: fmt.Sprintf("conv%03d", reader),
		ReadSeq: int64(i/benchReaders + 1), UpdatedAt: time.Now().UTC()}
}

func reportWrites(b *testing.B, store *countingStore, frames int) {
	if n := store.cursors.Load(); n > 0 {
		b.ReportMetric(float64(frames)/float64(n), "frames/cursor-write")
	}
	if n := store.flushes.Load(); n > 0 {
		b.ReportMetric(float64(frames)/float64(n), "frames/flush")
	}
}
