package storage_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// newGroup stores a group of ann, ben and cy.
func newGroup(t *testing.T, s *storage.Store, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.EnsureConversation(ctx, storage.Conversation{ID: id, Kind: storage.KindGroup, Members: []string{"ann", "ben", "cy"}}); err != nil {
		t.Fatal(err)
	}
}

// storeAhead stores the messages seqs of conversation id, each sent by the sender given for it
// and mentioning the mentioned, with no counter raise.
func storeAhead(t *testing.T, s *storage.Store, id string, sends map[int64]string, mentioned map[int64][]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, seq := range slices.Sorted(maps.Keys(sends)) {
		m := msg(id, seq)
		m.SenderID, m.Body, m.Mentions = sends[seq], "ahead", mentioned[seq]
		if err := s.InsertMessages(ctx, []storage.Message{m}); err != nil {
			t.Fatalf("store seq %d: %v", seq, err)
		}
	}
}

// raise raises conversation id's counters to lastSeq, opening them (ahead) or closing them.
func raise(t *testing.T, s *storage.Store, id string, lastSeq int64, ahead bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.AdvanceCounters(ctx, map[string]storage.Counters{id: {LastSeq: lastSeq, Ahead: ahead}}); err != nil {
		t.Fatalf("raise counters of %s to %d: %v", id, lastSeq, err)
	}
}

func readConversation(t *testing.T, s *storage.Store, id string) storage.Conversation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.Conversation(ctx, id)
	if err != nil {
		t.Fatalf("read conversation %s: %v", id, err)
	}
	return c
}

// TestAReadFoldsInTheMessagesStoredAheadOfOpenCounters: while an owner runs ahead of a
// conversation's counters, a read of the conversation (alone, and in a member's list) counts the
// messages stored after them as the owner's next raise will: lastSeq, the newest preview, each
// sender's newest seq (their read position) and the mention seqs.
func TestAReadFoldsInTheMessagesStoredAheadOfOpenCounters(t *testing.T) {
	s := testenv.Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newGroup(t, s, "g")
	storeAhead(t, s, "g", map[int64]string{1: "ann", 2: "ann"}, nil)
	raise(t, s, "g", 2, true)
	// Six messages ahead: more than one read's probe.
	storeAhead(t, s, "g", map[int64]string{3: "ben", 4: "ann", 5: "ann", 6: "ann", 7: "ben", 8: "ann"},
		map[int64][]string{3: {"cy", "ben"}, 7: {"cy"}})

	c := readConversation(t, s, "g")
	if c.LastSeq != 8 || !c.CountersOpen || c.LastMessage == nil || c.LastMessage.Seq != 8 || c.LastMessage.Body != "ahead" {
		t.Fatalf("lastSeq %d (counters open: %v), preview %+v; want 8, open, the preview of seq 8", c.LastSeq, c.CountersOpen, c.LastMessage)
	}
	if want := map[string]int64{"ann": 8, "ben": 7}; !maps.Equal(c.Senders, want) {
		t.Errorf("senders %v; want %v", c.Senders, want)
	}
	if got := c.Mentioned["cy"]; !slices.Equal(got, []int64{3, 7}) {
		t.Errorf("cy's mention seqs %v; want [3 7]", got)
	}
	if got, ok := c.Mentioned["ben"]; ok {
		t.Errorf("ben is mentioned at %v by his own message; want not", got)
	}
	list, err := s.ConversationsOf(ctx, "cy")
	if err != nil || len(list) != 1 || list[0].LastSeq != 8 {
		t.Fatalf("cy's list %+v, %v; want g at lastSeq 8", list, err)
	}
}

// TestClosedCountersAreNotLookedPast: once the owner closes the counters, a message claimed
// after them (one whose raise never came: its send was not acked) is not counted, and a raise
// that opens them again makes reads look past them once more.
func TestClosedCountersAreNotLookedPast(t *testing.T) {
	s := testenv.Store(t)
	newGroup(t, s, "c")
	storeAhead(t, s, "c", map[int64]string{1: "ann", 2: "ann"}, nil)
	raise(t, s, "c", 2, false)
	storeAhead(t, s, "c", map[int64]string{3: "ann"}, nil)
	if c := readConversation(t, s, "c"); c.LastSeq != 2 || c.CountersOpen {
		t.Fatalf("closed counters at 2 read as lastSeq %d (open: %v); want 2, closed", c.LastSeq, c.CountersOpen)
	}
	raise(t, s, "c", 3, true)
	storeAhead(t, s, "c", map[int64]string{4: "ann"}, nil)
	if c := readConversation(t, s, "c"); c.LastSeq != 4 {
		t.Fatalf("reopened counters at 3 read as lastSeq %d; want 4", c.LastSeq)
	}
}

// TestAStaleOwnersCloseLeavesTheCountersOpen: an owner that lost the conversation and closes its
// counters late, at the lastSeq it knew, does not close them over what the new owner stored
// ahead of them.
func TestAStaleOwnersCloseLeavesTheCountersOpen(t *testing.T) {
	s := testenv.Store(t)
	newGroup(t, s, "c")
	storeAhead(t, s, "c", map[int64]string{1: "ann", 2: "ann", 3: "ben"}, nil)
	raise(t, s, "c", 3, true) // the new owner opens them with seq 3
	storeAhead(t, s, "c", map[int64]string{4: "ben"}, nil)
	raise(t, s, "c", 2, false) // the stale owner closes at the seq it knew
	if c := readConversation(t, s, "c"); c.LastSeq != 4 || c.Senders["ben"] != 4 {
		t.Fatalf("after a stale close: lastSeq %d, ben's newest %d; want 4 and 4", c.LastSeq, c.Senders["ben"])
	}
	raise(t, s, "c", 4, false) // the new owner closes them over all it stored
	storeAhead(t, s, "c", map[int64]string{5: "ben"}, nil)
	if c := readConversation(t, s, "c"); c.LastSeq != 4 {
		t.Fatalf("after the owner's close: lastSeq %d; want 4", c.LastSeq)
	}
}
