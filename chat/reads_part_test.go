package chat

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// The read-state part alone: a small store of conversations and cursors, cursor moves that only
// wait (Reads), a bus that records what it publishes, and a hub holding the online positions.

// readRecords is a readStore in memory.
type readRecords struct {
	convs   []storage.Conversation
	cursors []storage.Cursor
}

func (r *readRecords) Conversation(_ context.Context, id string) (storage.Conversation, error) {
	for _, c := range r.convs {
		if c.ID == id {
			return c, nil
		}
	}
	return storage.Conversation{}, storage.ErrNotFound
}
func (r *readRecords) ConversationsOf(context.Context, string) ([]storage.Conversation, error) {
	return r.convs, nil
}
func (r *readRecords) User(_ context.Context, id string) (storage.User, error) {
	return storage.User{ID: id}, nil
}
func (r *readRecords) CursorsOf(context.Context, string) ([]storage.Cursor, error) {
	return r.cursors, nil
}
func (r *readRecords) MessageRange(context.Context, string, int64, int64) ([]storage.Message, error) {
	return nil, nil
}
func (r *readRecords) CountReaders(context.Context, string, int64, string) (int64, error) {
	return 0, nil
}
func (r *readRecords) CountDelivered(context.Context, string, int64, string) (int64, error) {
	return 0, nil
}
func (r *readRecords) Readers(context.Context, string, int64, string, int64) ([]storage.Cursor, error) {
	return nil, nil
}
func (r *readRecords) SetHideReceipts(context.Context, string, bool) error { return nil }

// waitingReads is a Reads whose moves wait until a flush that never comes.
type waitingReads struct {
	mu    sync.Mutex
	moves []storage.Cursor
}

func (w *waitingReads) Advance(cur storage.Cursor) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.moves = append(w.moves, cur)
}
func (w *waitingReads) Pending(string) []storage.Cursor {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.moves)
}
func (w *waitingReads) FlushUser(context.Context, string) error         { return nil }
func (w *waitingReads) FlushConversation(context.Context, string) error { return nil }

func newReadStatePart(records *readRecords) (*readState, *waitingReads, *publishedBus) {
	reads, bus := &waitingReads{}, &publishedBus{}
	l := newLive(Config{LiveReceiptsMaxMembers: 32}, bus, zerolog.Nop())
	return &readState{live: l, store: records, reads: reads}, reads, bus
}

// TestReadStatePartMovesForward: a read moves the position forward only, clamped to the last
// seq; it is written through Reads, told to the user's devices (cursor and badge) and other nodes,
// and, in a small group, to the other members as a receipt; a user who hides receipts sends none.
func TestReadStatePartMovesForward(t *testing.T) {
	r, reads, bus := newReadStatePart(&readRecords{})
	ctx := t.Context()
	u := &onlineUser{positions: map[string]*position{"g": {kind: storage.KindGroup, members: 3, loadedSeq: 10, readSeq: 2}}}
	bob := &fakeConn{user: "bob"}
	r.hub.Add(bob, 0, u)

	if err := r.Read(ctx, "bob", "g", 5); err != nil {
		t.Fatal(err)
	}
	if err := r.Read(ctx, "bob", "g", 4); err != nil { // behind: nothing
		t.Fatal(err)
	}
	if err := r.Read(ctx, "bob", "g", 99); err != nil { // past the end: clamped
		t.Fatal(err)
	}
	var written []int64
	for _, m := range reads.Pending("bob") {
		written = append(written, m.ReadSeq)
	}
	if !slices.Equal(written, []int64{5, 10}) {
		t.Fatalf("cursor moves written %v; want [5 10]", written)
	}
	want := []string{"bob: cursor g 5", "g: receipt bob 5", "bob: cursor g 10", "g: receipt bob 10"}
	if got := bus.published(); !slices.Equal(got, want) {
		t.Fatalf("published %q; want %q", got, want)
	}
	badges := bob.ofType(t, protocol.TypeBadge)
	if len(badges) == 0 || *badges[len(badges)-1].frame.Unread != 0 || *badges[len(badges)-1].frame.Total != 0 {
		t.Fatalf("bob's badges %+v; want the last to say nothing unread", badges)
	}

	u.hideReceipts = true
	u.positions["g"].loadedSeq = 12
	if err := r.Read(ctx, "bob", "g", 12); err != nil {
		t.Fatal(err)
	}
	if got := bus.published()[4:]; !slices.Equal(got, []string{"bob: cursor g 12"}) {
		t.Fatalf("published %q after a read with receipts hidden; want the cursor only", got)
	}
	if err := r.Read(ctx, "bob", "nope", 1); err != protocol.ErrNotMember {
		t.Fatalf("a read of a conversation bob is not in: %v; want not a member", err)
	}
}

// TestReadStatePartBadge: a user who is not connected gets their badge from the stored positions
// with the moves not yet written on top, tombstones after the position not counted.
func TestReadStatePartBadge(t *testing.T) {
	r, reads, _ := newReadStatePart(&readRecords{
		convs: []storage.Conversation{
			{ID: "g", Kind: storage.KindGroup, Members: []string{"alice", "bob"}, LastSeq: 10, DeletedSeqs: []int64{3, 9}},
			{ID: "d", Kind: storage.KindDM, Members: []string{"alice", "bob"}, LastSeq: 4, Senders: map[string]int64{"bob": 3}},
		},
		cursors: []storage.Cursor{{UserID: "bob", ConversationID: "g", ReadSeq: 5}},
	})
	reads.Advance(storage.Cursor{UserID: "bob", ConversationID: "g", ReadSeq: 7})
	got, err := r.Badge(t.Context(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	// g: 10 - 7, less the tombstone at 9; d: 4 - 3 (his own message at 3 is read).
	if got.Unread != 3 {
		t.Fatalf("bob's badge %d; want 3", got)
	}
}
