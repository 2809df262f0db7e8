package storage_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// TestSendersCountAsReaders: a member's own newest message is their read position, stored by the
// owner's counter write (senders only move forward); receipts count a member who sent at or
// after a seq as having read it, beside the members whose cursors are there, and still leave out
// those who hide their receipts (from reads, not from deliveries) and the message's sender.
func TestSendersCountAsReaders(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.EnsureConversation(ctx, storage.Conversation{ID: "g", Kind: storage.KindGroup,
		Members: []string{"ann", "bea", "cal", "dan", "eve"}, CreatedBy: "ann", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if err := s.AdvanceCounters(ctx, map[string]storage.Counters{"g": {LastSeq: 5,
		Senders: map[string]int64{"bea": 3, "cal": 5, "eve": 5}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AdvanceCounters(ctx, map[string]storage.Counters{"g": {LastSeq: 2, // a late batch
		Senders: map[string]int64{"bea": 2}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AdvanceCursors(ctx, []storage.Cursor{{UserID: "dan", ConversationID: "g", ReadSeq: 4},
		{UserID: "eve", ConversationID: "g", ReadSeq: 1, Hidden: true}}); err != nil {
		t.Fatal(err)
	}
	convs, err := s.ConversationsOf(ctx, "bea")
	if err != nil {
		t.Fatal(err)
	}
	if len(convs) != 1 || convs[0].LastSeq != 5 || !maps.Equal(convs[0].Senders, map[string]int64{"bea": 3, "cal": 5, "eve": 5}) {
		t.Fatalf("the conversation as stored: %+v; want lastSeq 5 and senders bea 3, cal 5, eve 5", convs)
	}
	if got := convs[0].ReadSeq("bea", storage.Cursor{ReadSeq: 1}); got != 3 {
		t.Errorf("bea's read position with her cursor at 1: %d; want 3, her own message", got)
	}

	count := func(what string, f func(context.Context, string, int64, string) (int64, error), seq int64, sender string, want int64) {
		t.Helper()
		n, err := f(ctx, "g", seq, sender)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s of seq %d from %s: %d; want %d", what, seq, sender, n, want)
		}
	}
	count("readers", s.CountReaders, 3, "ann", 3)      // bea and cal sent since, dan's cursor; eve hides
	count("readers", s.CountReaders, 5, "ann", 1)      // cal
	count("readers", s.CountReaders, 3, "cal", 2)      // bea, dan: not the sender herself
	count("deliveries", s.CountDelivered, 5, "ann", 2) // cal and eve: hiding does not hide this
	count("deliveries", s.CountDelivered, 1, "ann", 4)

	readers, err := s.Readers(ctx, "g", 3, "ann", 10)
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]int64)
	for _, r := range readers {
		got[r.UserID] = r.ReadSeq
	}
	if want := map[string]int64{"bea": 3, "cal": 5, "dan": 4}; !maps.Equal(got, want) {
		t.Errorf("readers of seq 3: %v; want %v", got, want)
	}
	if err := s.RemoveMember(ctx, "g", "cal"); err != nil {
		t.Fatal(err)
	}
	count("readers", s.CountReaders, 5, "ann", 0) // a member who left reads nothing any more
}
