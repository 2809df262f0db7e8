package storage_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// TestMigrateMovesEveryMessageOnceAndResumes: messages stored one document each (the layout
// before buckets), with edits and tombstones, are moved into buckets by a run interrupted after
// its first step, resumed, and run once more; then every conversation pages the same messages,
// a catch-up finds the same changes in version order, and new sends continue after them.
func TestMigrateMovesEveryMessageOnceAndResumes(t *testing.T) {
	sizes := map[string]int64{"a-big": 150, "b-small": 5, "c-empty": 0}
	cfg := testenv.StoreConfig(t)
	s := testenv.OpenStore(t, cfg)
	db := testenv.Database(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	written := make(map[string][]storage.Message)
	for conv, n := range sizes {
		if _, err := s.EnsureConversation(ctx, storage.Conversation{ID: conv, Kind: storage.KindGroup, Members: []string{"ann", "ben"}}); err != nil {
			t.Fatal(err)
		}
		var docs []any
		for seq := int64(1); seq <= n; seq++ {
			m := storage.Message{ConversationID: conv, Seq: seq, SenderID: "ann", Kind: protocol.KindText, Body: fmt.Sprintf("%s #%d", conv, seq),
				CreatedAt: time.Now().UTC().Truncate(time.Millisecond), ClientMsgID: fmt.Sprintf("%s-%d", conv, seq)}
			switch {
			case seq%10 == 0: // edited, versions in the order 10, 20, ...
				m.Version, m.Body = seq/10, "edited"
			case seq%7 == 0:
				m.Kind, m.Body = protocol.KindDeleted, ""
			}
			written[conv] = append(written[conv], m)
			docs = append(docs, m)
		}
		if len(docs) > 0 {
			if _, err := db.Collection("messages").InsertMany(ctx, docs); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.AdvanceCounters(ctx, map[string]storage.Counters{conv: {LastSeq: n, LastVersion: n / 10}}); err != nil {
			t.Fatal(err)
		}
	}

	// A store written before the user-keyed lists has none.
	if err := db.Collection("memberships").Drop(ctx); err != nil {
		t.Fatal(err)
	}

	interrupted, stop := context.WithCancel(ctx)
	err := s.Migrate(interrupted, 1, func(storage.MigrateProgress) { stop() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted migration returned %v", err)
	}
	var steps []storage.MigrateProgress
	for range 2 { // resume, then run over a finished migration
		if err := s.Migrate(ctx, 1, func(p storage.MigrateProgress) { steps = append(steps, p) }); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	if len(steps) == 0 || !steps[len(steps)-1].Done || steps[0].After != "b-small" {
		t.Fatalf("resumed steps %+v; want it to go on after a-big and finish", steps)
	}

	for conv, want := range written {
		page, err := s.MessageRange(ctx, conv, 1, sizes[conv]+10)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != len(want) {
			t.Fatalf("%s pages %d messages; want %d", conv, len(page), len(want))
		}
		for i := range want {
			if got := page[i]; got.Seq != want[i].Seq || got.Body != want[i].Body || got.Kind != want[i].Kind || got.Version != want[i].Version ||
				got.ClientMsgID != want[i].ClientMsgID || !got.CreatedAt.Equal(want[i].CreatedAt) {
				t.Fatalf("%s seq %d: %+v; want %+v", conv, want[i].Seq, got, want[i])
			}
		}
	}
	changed, err := s.ChangedMessages(ctx, "a-big", 3, 1000, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(changed); !slices.Equal(got, []int64{40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150}) {
		t.Fatalf("changes after version 3: seqs %v", got)
	}
	if _, err := s.MessageByClientID(ctx, "a-big", "a-big-77"); err != nil {
		t.Fatalf("a retried old send is not found: %v", err)
	}
	if high, err := s.RecoverSeq(ctx, "a-big"); err != nil || high != 150 {
		t.Fatalf("a new owner continues after %d, %v; want 150", high, err)
	}
	var dup *storage.DuplicateError
	if err := s.InsertMessages(ctx, []storage.Message{msg("a-big", 150)}); !errors.As(err, &dup) {
		t.Fatalf("a write at a migrated seq: %v; want refused", err)
	}
	if convs, err := s.ConversationsOf(ctx, "ben"); err != nil || len(convs) != len(sizes) {
		t.Fatalf("ben's conversations after the migration: %d, %v; want %d", len(convs), err, len(sizes))
	}
	var none bson.M
	if err := db.Collection("migrations").FindOne(ctx, bson.D{{Key: "_id", Value: "message-buckets"}, {Key: "done", Value: true}}).Decode(&none); err != nil {
		t.Fatalf("the migration is not recorded as done: %v", err)
	}
}
