package chat

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/testenv/poll"
)

// TestReadMovesEveryDeviceOnce: one read gives each of the reader's connections, the one that
// read included, one cursor and one badge frame, even when the bus delivers the event twice; the
// DM peer gets one receipt; a read that is not forward sends nothing; past the end it is clamped.
func TestReadMovesEveryDeviceOnce(t *testing.T) {
	ts := newTestService(t)
	peer := []*fakeConn{ts.connect("alice"), ts.connect("alice")}
	reader := []*fakeConn{ts.connect("bob"), ts.connect("bob"), ts.connect("bob")}
	dm := ts.dm("alice", "bob")
	for range 5 {
		ts.send("alice", dm, "m")
	}
	all := append(slices.Clone(peer), reader...)
	for _, c := range all {
		c.forget()
	}

	ts.bus.echo(2) // the bus may deliver an event more than once
	if err := ts.svc.Read(ts.ctx, "bob", dm, 3); err != nil {
		t.Fatal(err)
	}
	for i, c := range reader {
		frames := c.all(t)
		if len(frames) != 2 {
			t.Fatalf("bob's connection %d got %d frames, want one cursor and one badge: %+v", i, len(frames), frames)
		}
		cur, badge := c.ofType(t, protocol.TypeCursor), c.ofType(t, protocol.TypeBadge)
		if len(cur) != 1 || len(badge) != 1 {
			t.Fatalf("bob's connection %d got %d cursors and %d badges, want one each", i, len(cur), len(badge))
		}
		if f := cur[0]; f.via != viaEphemeral || f.key != "cursor:"+dm || f.frame.ConversationID != dm || f.frame.ReadSeq != 3 {
			t.Errorf("cursor frame %+v (key %q by %s), want readSeq 3, ephemeral", f.frame, f.key, f.via)
		}
		f := badge[0]
		if f.via != viaEphemeral || f.frame.Unread == nil || *f.frame.Unread != 2 || f.frame.Total == nil || *f.frame.Total != 2 ||
			f.frame.ReadSeq != 3 || f.frame.LastSeq != 5 {
			t.Errorf("badge frame %s (by %s), want unread 2, total 2, readSeq 3, lastSeq 5", f.data, f.via)
		}
	}
	for i, c := range peer {
		frames := c.all(t)
		if len(frames) != 1 || frames[0].frame.Type != protocol.TypeReceipt {
			t.Fatalf("alice's connection %d got %+v, want one receipt", i, frames)
		}
		if f := frames[0]; f.via != viaEphemeral || f.frame.UserID != "bob" || f.frame.ReadSeq != 3 || f.frame.ConversationID != dm {
			t.Errorf("receipt %s (by %s), want bob at 3", f.data, f.via)
		}
	}

	// Not forward: nothing is sent, nothing moves.
	advances := len(ts.reads.advanced())
	for _, seq := range []int64{3, 2, 1} {
		if err := ts.svc.Read(ts.ctx, "bob", dm, seq); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range all {
		if got := c.count(); got != 2 && c.user == "bob" || got != 1 && c.user == "alice" {
			t.Errorf("%s got frames from reads that were not forward: %+v", c.user, c.all(t))
		}
	}
	if got := ts.reads.advanced()[advances:]; len(got) > 0 {
		t.Errorf("reads that were not forward moved the cursor: %+v", got)
	}

	// Past the end: clamped to the last seq.
	if err := ts.svc.Read(ts.ctx, "bob", dm, 100); err != nil {
		t.Fatal(err)
	}
	if cur := reader[0].ofType(t, protocol.TypeCursor); len(cur) != 2 || cur[1].frame.ReadSeq != 5 {
		t.Errorf("a read past the end gave cursors %+v, want a second one at 5", cur)
	}
	if pend, _ := ts.reads.pendingOf("bob", dm); pend.ReadSeq != 5 {
		t.Errorf("a read past the end left the pending cursor at %d, want 5", pend.ReadSeq)
	}
	if v := ts.conversation("bob", dm); v.Unread != 0 {
		t.Errorf("after reading everything bob sees unread %d", v.Unread)
	}
}

// TestReceiptsOnlyMoveForward: receipt events that arrive out of order (8 then 5) show the peer
// only 8, and the reader's own devices see none.
func TestReceiptsOnlyMoveForward(t *testing.T) {
	ts := newTestService(t)
	alice, bob := ts.connect("alice"), ts.connect("bob")
	dm := ts.dm("alice", "bob")
	alice.forget()
	bob.forget()
	for _, seq := range []int64{8, 5, 8} {
		data, err := json.Marshal(conversationEvent{Type: protocol.TypeReceipt, UserID: "bob", ReadSeq: seq})
		if err != nil {
			t.Fatal(err)
		}
		ts.svc.HandleConversationEvent(dm, data)
	}
	got := alice.ofType(t, protocol.TypeReceipt)
	if len(got) != 1 || got[0].frame.ReadSeq != 8 {
		t.Errorf("alice got receipts %+v, want only bob at 8", got)
	}
	if n := bob.count(); n != 0 {
		t.Errorf("bob got %d frames about his own receipt", n)
	}
}

// TestHiddenReceipts: a user who hides receipts publishes none, and so does anyone in a group
// larger than LiveReceiptsMaxMembers; their own devices still follow the cursor.
func TestHiddenReceipts(t *testing.T) {
	ts := newTestServiceWith(t, Config{LiveReceiptsMaxMembers: 2}, hubConfig{})
	alice, bob, carol := ts.connect("alice"), ts.connect("bob"), ts.connect("carol")
	dm := ts.dm("alice", "bob")
	group := ts.group("alice", "bob", "carol") // three members: past the live-receipts limit
	ts.send("alice", dm, "m")
	ts.send("alice", group, "m")
	for _, c := range []*fakeConn{alice, bob, carol} {
		c.forget()
	}

	if err := ts.svc.Read(ts.ctx, "bob", group, 1); err != nil {
		t.Fatal(err)
	}
	if err := ts.svc.SetPrivacy(ts.ctx, "bob", true); err != nil {
		t.Fatal(err)
	}
	if err := ts.svc.Read(ts.ctx, "bob", dm, 1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*fakeConn{alice, carol} {
		if got := c.ofType(t, protocol.TypeReceipt); len(got) > 0 {
			t.Errorf("%s got receipts of bob: %+v", c.user, got)
		}
	}
	if got := ts.bus.published(evConversation, ""); len(got) > 0 {
		t.Errorf("receipt events were published: %q", got[0].data)
	}
	if got := bob.ofType(t, protocol.TypeCursor); len(got) != 2 {
		t.Errorf("bob's device got %d cursor frames, want 2", len(got))
	}
	if pend, _ := ts.reads.pendingOf("bob", dm); !pend.Hidden {
		t.Errorf("bob's cursor is written as not hidden: %+v", pend)
	}
	// Receipts counts him out too, and the flush made his cursor countable at all.
	r, err := ts.svc.Receipts(ts.ctx, "alice", dm, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.ReadBy != 0 || len(r.Readers) != 0 {
		t.Errorf("receipts %+v count a user who hides them", r)
	}

	if err := ts.svc.SetPrivacy(ts.ctx, "bob", false); err != nil {
		t.Fatal(err)
	}
	ts.send("alice", dm, "m")
	if err := ts.svc.Read(ts.ctx, "bob", dm, 2); err != nil {
		t.Fatal(err)
	}
	if got := alice.ofType(t, protocol.TypeReceipt); len(got) != 1 || got[0].frame.ReadSeq != 2 {
		t.Errorf("after showing receipts again alice got %+v, want bob at 2", got)
	}
	if r, err = ts.svc.Receipts(ts.ctx, "alice", dm, 2); err != nil {
		t.Fatal(err)
	}
	if r.ReadBy != 1 || len(r.Readers) != 1 || r.Readers[0] != (protocol.Reader{UserID: "bob", ReadSeq: 2}) {
		t.Errorf("receipts %+v, want bob at 2", r)
	}
}

// TestReadOverHTTP: a user with no connection here reads through the store's membership; the
// peer gets the receipt.
func TestReadOverHTTP(t *testing.T) {
	ts := newTestService(t)
	alice := ts.connect("alice")
	dm := ts.dm("alice", "bob")
	for range 3 {
		ts.send("alice", dm, "m")
	}
	alice.forget()
	if err := ts.svc.Read(ts.ctx, "bob", dm, 7); err != nil {
		t.Fatal(err)
	}
	if pend, ok := ts.reads.pendingOf("bob", dm); !ok || pend.ReadSeq != 3 {
		t.Errorf("bob's pending cursor %+v, want clamped to 3", pend)
	}
	if got := alice.ofType(t, protocol.TypeReceipt); len(got) != 1 || got[0].frame.ReadSeq != 3 {
		t.Errorf("alice got receipts %+v, want bob at 3", got)
	}
}

// TestTypingThrottled: many typing calls within the interval fan out once, to the other member
// only; after the interval once more.
func TestTypingThrottled(t *testing.T) {
	const interval = 50 * time.Millisecond
	ts := newTestServiceWith(t, Config{TypingInterval: interval}, hubConfig{})
	alice, bob := ts.connect("alice"), ts.connect("bob")
	dm := ts.dm("alice", "bob")
	other := ts.dm("alice", "carol")
	alice.forget()
	bob.forget()

	first := time.Now()
	for range 100 {
		if err := ts.svc.Typing("alice", dm); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts.svc.Typing("alice", other); err != nil { // another conversation has its own throttle
		t.Fatal(err)
	}
	got := bob.ofType(t, protocol.TypeTyping)
	if len(got) != 1 {
		t.Fatalf("100 typing calls gave bob %d typing frames, want 1", len(got))
	}
	if f := got[0]; f.via != viaEphemeral || f.frame.UserID != "alice" || f.frame.ConversationID != dm {
		t.Errorf("typing frame %s (by %s), want alice in the DM, ephemeral", f.data, f.via)
	}
	if n := alice.count(); n != 0 {
		t.Errorf("the typer got %d frames: %+v", n, alice.all(t))
	}
	if n := len(ts.bus.published(evConversation, other)); n != 1 {
		t.Errorf("typing in another conversation was published %d times, want 1", n)
	}

	poll.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		if n := len(bob.ofType(t, protocol.TypeTyping)); n < 2 {
			if err := ts.svc.Typing("alice", dm); err != nil {
				t.Fatal(err)
			}
			return fmt.Errorf("typing never fanned out again after the interval: bob got %d typing frames", n)
		}
		return nil
	})
	if since := time.Since(first); since < interval {
		t.Errorf("typing fanned out again after %v, within the interval %v", since, interval)
	}
	if got := len(bob.ofType(t, protocol.TypeTyping)); got != 2 {
		t.Errorf("bob got %d typing frames, want 2", got)
	}
}

// TestOpenAndClose: the last connection's close writes that user's pending cursors and nobody
// else's; an open reads the cursors through what is pending; receipts write only their
// conversation's; a thousand connections of one user never write another's.
func TestOpenAndClose(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	dm := ts.dm("alice", "bob")
	other := ts.dm("alice", "carol")
	for range 5 {
		ts.send("alice", dm, "m")
	}
	ts.send("alice", other, "m")
	if err := ts.svc.Read(ts.ctx, "carol", other, 1); err != nil { // carol, over HTTP: pending
		t.Fatal(err)
	}
	third := ts.dm("alice", "dave")
	// dave sends from another node: through the owner, with no connection here.
	if _, err := ts.sender.Send(ts.ctx, sequencer.SendRequest{ConversationID: third, SenderID: "dave",
		ClientMsgID: uuid.NewString(), Kind: protocol.KindText, Body: "m"}); err != nil {
		t.Fatal(err)
	}
	if err := ts.svc.Read(ts.ctx, "alice", third, 1); err != nil { // a pending move of alice's
		t.Fatal(err)
	}

	// Bob reads over HTTP (not connected); the move is pending, not in the store.
	if err := ts.svc.Read(ts.ctx, "bob", dm, 4); err != nil {
		t.Fatal(err)
	}
	if got := ts.store.cursor("bob", dm).ReadSeq; got != 0 {
		t.Fatalf("the store has bob at %d before any flush", got)
	}
	b1 := &fakeConn{user: "bob"}
	total, err := ts.svc.Open(ts.ctx, b1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if total != 1 {
		t.Errorf("open says bob has %d unread, want 1 (5 sent, 4 read and pending)", total)
	}
	b2 := ts.connect("bob")
	if v := ts.conversation("bob", dm); v.Unread != 1 || v.ReadSeq != 4 {
		t.Errorf("bob sees %+v, want readSeq 4, unread 1", v)
	}

	// Receipts write the conversation's pending moves first, and only those.
	r, err := ts.svc.Receipts(ts.ctx, "alice", dm, 4)
	if err != nil {
		t.Fatal(err)
	}
	if r.ReadBy != 1 {
		t.Errorf("receipts of seq 4 say read by %d, want 1 (bob's pending move, written first)", r.ReadBy)
	}
	if _, convs := ts.reads.flushes(); !slices.Equal(convs, []string{dm}) {
		t.Errorf("receipts flushed conversations %v, want only %s", convs, dm)
	}
	if _, ok := ts.reads.pendingOf("carol", other); !ok {
		t.Errorf("receipts of one conversation wrote carol's cursor in another")
	}

	// Closing bob's connections: only the last writes, and only bob's.
	if err := ts.svc.Read(ts.ctx, "bob", dm, 5); err != nil {
		t.Fatal(err)
	}
	ts.svc.Close(b1)
	if users, _ := ts.reads.flushes(); len(users) > 0 {
		t.Fatalf("closing one of two connections flushed %v", users)
	}
	ts.svc.Close(b2)
	if users, _ := ts.reads.flushes(); !slices.Equal(users, []string{"bob"}) {
		t.Errorf("closing bob's last connection flushed %v, want [bob]", users)
	}
	if got := ts.store.cursor("bob", dm).ReadSeq; got != 5 {
		t.Errorf("the store has bob at %d after his last close, want 5", got)
	}
	if _, ok := ts.reads.pendingOf("carol", other); !ok {
		t.Errorf("bob's close wrote carol's cursor")
	}
	if _, ok := ts.reads.pendingOf("alice", third); !ok {
		t.Errorf("bob's close wrote alice's cursor")
	}

	for range 1000 {
		c := &fakeConn{user: "carol"}
		if _, err := ts.svc.Open(ts.ctx, c, nil); err != nil {
			t.Fatal(err)
		}
		ts.svc.Close(c)
	}
	users, _ := ts.reads.flushes()
	for _, u := range users[1:] {
		if u != "carol" {
			t.Fatalf("carol's connections flushed %s's cursors", u)
		}
	}
	if len(users) != 1001 {
		t.Errorf("%d flushes for 1000 closes of carol's only connection", len(users)-1)
	}
	if cur, ok := ts.reads.pendingOf("alice", third); !ok || cur.ReadSeq != 1 {
		t.Errorf("alice's pending cursor after carol's closes: %+v, %v", cur, ok)
	}
	if ts.hub.Connections() != 1 {
		t.Errorf("%d connections registered, want alice's 1", ts.hub.Connections())
	}
}

// TestBadgeReadsThroughPending: the badge of a user acting from elsewhere counts from the store
// with their pending moves on top, and a sender's own sends are not unread to them though their
// cursor never moved (the owner stores their position with the message).
func TestBadgeReadsThroughPending(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	dm := ts.dm("alice", "bob")
	group := ts.group("alice", "bob", "carol")
	for range 3 {
		ts.send("alice", dm, "m")
	}
	ts.send("alice", group, "m")
	if got := ts.store.cursor("alice", dm).ReadSeq; got != 0 {
		t.Fatalf("alice's sends moved her stored cursor (%d); they should cost no cursor write", got)
	}
	for _, tc := range []struct {
		user string
		want int64
	}{{"alice", 0}, {"bob", 4}, {"carol", 1}, {"dave", 0}} {
		got, err := ts.svc.Badge(ts.ctx, tc.user)
		if err != nil {
			t.Fatal(err)
		}
		if got.Unread != tc.want {
			t.Errorf("badge of %s is %d, want %d", tc.user, got, tc.want)
		}
	}
	if err := ts.svc.Read(ts.ctx, "bob", dm, 2); err != nil {
		t.Fatal(err)
	}
	if got, _ := ts.svc.Badge(ts.ctx, "bob"); got.Unread != 2 {
		t.Errorf("badge of bob after reading 2 of the DM is %d, want 2", got)
	}
}
