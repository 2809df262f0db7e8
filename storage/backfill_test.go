package storage_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

func TestBackfillIsResumableAndIdempotent(t *testing.T) {
	const batch = 200
	sizes := map[string]int{"big": 450, "small": 7, "empty": 0}
	cfg := testenv.StoreConfig(t)
	testenv.LegacyMessages(t, cfg, sizes)
	legacy := cfg
	legacy.SkipIndexes = true
	s := testenv.OpenStore(t, legacy)

	// Interrupt the first run after its first batch.
	ctx, cancel := context.WithCancel(context.Background())
	var steps []storage.BackfillProgress
	err := s.Backfill(ctx, batch, func(p storage.BackfillProgress) {
		steps = append(steps, p)
		cancel()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted backfill returned %v", err)
	}
	for range 2 { // resume, then run once more over finished data
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := s.Backfill(ctx, batch, func(p storage.BackfillProgress) { steps = append(steps, p) })
		cancel()
		if err != nil {
			t.Fatalf("backfill: %v", err)
		}
	}
	if len(steps) < 4 {
		t.Fatalf("backfill reported %d progress steps", len(steps))
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Numbered in the old layout; today's reads see them once moved into buckets.
	if err := s.Migrate(ctx, 0, nil); err != nil {
		t.Fatalf("migrate after backfill: %v", err)
	}
	for conv, n := range sizes {
		msgs, err := s.MessageRange(ctx, conv, 1, int64(n)+10)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != n {
			t.Fatalf("%s: %d numbered messages, want %d", conv, len(msgs), n)
		}
		for i, m := range msgs {
			if m.Seq != int64(i+1) || m.Body != fmt.Sprintf("%s #%d", conv, i+1) || m.ClientMsgID == "" {
				t.Fatalf("%s: position %d is seq %d %q (clientMsgId %q); want _id order 1..%d", conv, i, m.Seq, m.Body, m.ClientMsgID, n)
			}
		}
		c, err := s.Conversation(ctx, conv)
		if err != nil || c.LastSeq != int64(n) {
			t.Fatalf("%s lastSeq = %d, %v; want %d", conv, c.LastSeq, err, n)
		}
	}
	// The seqs are claimed now: a second message at a taken seq is refused.
	dup := storage.Message{ConversationID: "small", Seq: 3, SenderID: "ben", Kind: protocol.KindText, Body: "x", ClientMsgID: "fresh"}
	var de *storage.DuplicateError
	if err := s.InsertMessages(ctx, []storage.Message{dup}); !errors.As(err, &de) {
		t.Fatalf("insert at a taken seq after backfill: %v; want a duplicate", err)
	}
	// Members got read cursors, so their reads are kept; a legacy store has no memberships until
	// the migration rebuilds them, and a connect finds the cursors through them.
	if err := s.RebuildMemberships(ctx); err != nil {
		t.Fatal(err)
	}
	if cursors, err := s.CursorsOf(ctx, "ben"); err != nil || len(cursors) != len(sizes) {
		t.Fatalf("ben's cursors after backfill: %d, %v", len(cursors), err)
	}
}
