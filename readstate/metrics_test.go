package readstate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/readstate"
	"github.com/chatd/chatd/testenv/promtest"
)

// TestMetricsCountCoalescing: K moves of one cursor are K moves and one cursor write; a stale move
// is not a move; a failed flush is an error and writes nothing.
func TestMetricsCountCoalescing(t *testing.T) {
	reg := prometheus.NewRegistry()
	store := &fakeStore{}
	c := readstate.New(store, readstate.Config{Window: noWindow, Metrics: readstate.NewMetrics(reg)}, zerolog.Nop())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})

	const k = 50
	for seq := range k {
		c.Advance(cursor("alice", "c1", int64(seq+1)))
	}
	c.Advance(cursor("alice", "c1", 3)) // behind the pending move: dropped
	if err := c.Flush(testContext(t)); err != nil {
		t.Fatalf("flush: %v", err)
	}
	for name, want := range map[string]float64{
		"chatd_read_cursor_moves_total":  k,
		"chatd_read_cursor_writes_total": 1,
		"chatd_read_flush_errors_total":  0,
	} {
		if got := promtest.Read(t, reg, name).Value; got != want {
			t.Errorf("%s = %v after %d moves of one cursor and a flush, want %v", name, got, k, want)
		}
	}
	if got := promtest.Read(t, reg, "chatd_read_flush_seconds").Count; got != 1 {
		t.Errorf("chatd_read_flush_seconds has %v observations after one flush, want 1", got)
	}

	// Cursors are counted one by one, however many a flush writes.
	c.Advance(cursor("bob", "c1", 1))
	c.Advance(cursor("bob", "c2", 1))
	if err := c.Flush(testContext(t)); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if got := promtest.Read(t, reg, "chatd_read_cursor_writes_total").Value; got != 3 {
		t.Errorf("chatd_read_cursor_writes_total = %v after a flush of two more cursors, want 3", got)
	}

	store.setRefuse(refuseAll)
	c.Advance(cursor("carol", "c1", 1))
	if err := c.Flush(testContext(t)); !errors.Is(err, errStoreDown) {
		t.Fatalf("flush with the store down: %v, want %v", err, errStoreDown)
	}
	for name, want := range map[string]float64{
		"chatd_read_cursor_moves_total":  k + 3,
		"chatd_read_cursor_writes_total": 3,
		"chatd_read_flush_errors_total":  1,
	} {
		if got := promtest.Read(t, reg, name).Value; got != want {
			t.Errorf("%s = %v after a failed flush, want %v", name, got, want)
		}
	}
	if got := promtest.Read(t, reg, "chatd_read_flush_seconds").Count; got != 3 {
		t.Errorf("chatd_read_flush_seconds has %v observations after a failed flush, want 3", got)
	}
	store.setRefuse(refuseNone)
}
