package chat

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
)

// TestJoinArrivesOnce: a new conversation reaches each online member's devices as one
// conversation push, even when the bus delivers the join twice or it comes again later; then the
// conversation's messages reach them.
func TestJoinArrivesOnce(t *testing.T) {
	ts := newTestService(t)
	alice := ts.connect("alice")
	bob := []*fakeConn{ts.connect("bob"), ts.connect("bob")}
	carol := ts.connect("carol")
	ts.bus.echo(2)

	view, err := ts.svc.CreateGroup(ts.ctx, "alice", "team", []string{"bob"})
	if err != nil {
		t.Fatal(err)
	}
	if view.Unread != 0 || view.LastSeq != 0 || len(view.Members) != 2 {
		t.Errorf("the creator's view %+v, want two members and nothing unread", view)
	}
	for _, c := range append([]*fakeConn{alice}, bob...) {
		got := c.ofType(t, protocol.TypeConversation)
		if len(got) != 1 || got[0].via != viaPush || got[0].frame.Conversation == nil || got[0].frame.Conversation.ID != view.ID {
			t.Errorf("%s got conversation pushes %+v, want one of %s", c.user, got, view.ID)
		}
	}
	if n := carol.count(); n != 0 {
		t.Errorf("carol, not a member, got %d frames", n)
	}

	// The join event again, as after a resync: nothing new.
	before := bob[0].count()
	data, err := json.Marshal(userEvent{Type: userJoined, Conversation: &view})
	if err != nil {
		t.Fatal(err)
	}
	ts.svc.HandleUserEvent("bob", data)
	if got := bob[0].all(t)[before:]; len(got) > 0 {
		t.Errorf("a repeated join gave bob %+v", got)
	}

	ts.bus.echo(1)
	ts.send("alice", view.ID, "welcome")
	for _, c := range bob {
		if got := c.seqs(t, view.ID); !slices.Equal(got, []int64{1}) {
			t.Errorf("bob's device got seqs %v after joining, want [1]", got)
		}
	}
	if _, err := ts.svc.Send(ts.ctx, "bob", SendRequest{ConversationID: view.ID, ClientMsgID: "b1", Body: "hi"}); err != nil {
		t.Errorf("bob cannot send to the group he joined: %v", err)
	}
}

// TestAddMembers: added users' devices get the conversation, the change is made and announced as
// a system message by the owner, and the new member receives what follows.
func TestAddMembers(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	dave := ts.connect("dave")
	group := ts.group("alice", "bob")
	ts.send("alice", group, "before dave")
	if err := ts.svc.AddMembers(ts.ctx, "alice", group, []string{"dave", "dave", "bob"}); err != nil {
		t.Fatal(err)
	}
	if c, _ := ts.store.conv(group); !slices.Equal(c.Members, []string{"alice", "bob", "dave"}) {
		t.Errorf("members %v, want alice, bob, dave once each", c.Members)
	}
	if got := dave.ofType(t, protocol.TypeConversation); len(got) != 1 {
		t.Errorf("dave got %d conversation pushes, want 1", len(got))
	}
	msgs := ts.store.messages(group)
	if last := msgs[len(msgs)-1]; last.Kind != protocol.KindSystem || last.Body != "alice added dave" {
		t.Errorf("last message %+v, want the system message \"alice added dave\"", last)
	}
	if got := ts.sender.sent(); !slices.ContainsFunc(got, func(r sequencer.SendRequest) bool { return r.Group != nil && r.Group.Action == "add" }) {
		t.Errorf("the addition was not made by the owner (requests %+v)", got)
	}
	m := ts.send("alice", group, "hello dave")
	if got := dave.seqs(t, group); !slices.Contains(got, m.Seq) {
		t.Errorf("dave got seqs %v, want %d among them", got, m.Seq)
	}
}

// TestRemoveMember: the removed user's devices get one removed push and no further messages,
// their sends are refused, and the others carry on; leaving works the same.
func TestRemoveMember(t *testing.T) {
	ts := newTestService(t)
	alice := ts.connect("alice")
	bob := []*fakeConn{ts.connect("bob"), ts.connect("bob")}
	carol := ts.connect("carol")
	group := ts.group("alice", "bob", "carol")
	ts.send("alice", group, "one")
	ts.bus.echo(2)

	// The removal takes effect here at once, before any event of it comes back over the bus.
	ts.bus.hold()
	if err := ts.svc.RemoveMember(ts.ctx, "alice", group, "bob"); err != nil {
		t.Fatal(err)
	}
	for i, c := range bob {
		if got := c.ofType(t, protocol.TypeRemoved); len(got) != 1 {
			t.Errorf("bob's connection %d got %d removed pushes before the bus delivered anything, want 1", i, len(got))
		}
	}
	ts.bus.release()
	ts.send("alice", group, "after bob")
	for i, c := range bob {
		got := c.ofType(t, protocol.TypeRemoved)
		if len(got) != 1 || got[0].via != viaPush || got[0].frame.ConversationID != group {
			t.Errorf("bob's connection %d got removed pushes %+v, want one", i, got)
		}
		if got := c.seqs(t, group); !slices.Equal(got, []int64{1}) {
			t.Errorf("bob's connection %d got seqs %v, want only [1] from before his removal", i, got)
		}
	}
	if _, err := ts.svc.Send(ts.ctx, "bob", SendRequest{ConversationID: group, ClientMsgID: "b1", Body: "hi"}); !errors.Is(err, protocol.ErrNotMember) {
		t.Errorf("a removed member's send: got %v, want protocol.ErrNotMember", err)
	}
	for _, c := range []*fakeConn{alice, carol} {
		if got := c.seqs(t, group); !slices.Equal(got, []int64{1, 2, 3}) {
			t.Errorf("%s got seqs %v, want 1..3 (the removal announced at 2)", c.user, got)
		}
		if got := c.ofType(t, protocol.TypeRemoved); len(got) > 0 {
			t.Errorf("%s got a removed push for bob's removal", c.user)
		}
	}
	if msgs := ts.store.messages(group); msgs[1].Kind != protocol.KindSystem || msgs[1].Body != "alice removed bob" {
		t.Errorf("seq 2 is %+v, want the system message \"alice removed bob\"", msgs[1])
	}

	if err := ts.svc.RemoveMember(ts.ctx, "carol", group, "carol"); err != nil {
		t.Fatal(err)
	}
	if got := carol.ofType(t, protocol.TypeRemoved); len(got) != 1 {
		t.Errorf("carol got %d removed pushes after leaving, want 1", len(got))
	}
	if msgs := ts.store.messages(group); msgs[len(msgs)-1].Body != "carol left" {
		t.Errorf("last message %+v, want \"carol left\"", msgs[len(msgs)-1])
	}
	if views, _ := ts.svc.ListConversations(ts.ctx, "carol"); len(views) != 0 {
		t.Errorf("carol still lists %+v", views)
	}
}

// TestDeleteAccount ends the user's connections; the DM peer's devices get removed; the user's
// group messages become tombstones with no sender and the group is told.
func TestDeleteAccount(t *testing.T) {
	ts := newTestService(t)
	alice := ts.connect("alice")
	bob := []*fakeConn{ts.connect("bob"), ts.connect("bob")}
	dm := ts.dm("alice", "bob")
	group := ts.group("alice", "bob")
	ts.send("bob", dm, "bye")
	ts.send("bob", group, "bye all")

	if err := ts.svc.DeleteAccount(ts.ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	for i, c := range bob {
		if got := c.endings(); len(got) != 1 {
			t.Errorf("bob's connection %d was ended %d times (%q), want once", i, len(got), got)
		}
	}
	if got := alice.endings(); len(got) > 0 {
		t.Errorf("alice's connection was ended: %q", got)
	}
	if got := alice.ofType(t, protocol.TypeRemoved); len(got) != 1 || got[0].frame.ConversationID != dm {
		t.Errorf("alice got removed pushes %+v, want one for the DM", got)
	}
	if got := ts.sender.reloaded(); !slices.Contains(got, dm) {
		t.Errorf("the DM's owner was not made to forget it (reloads %v)", got)
	}
	msgs := ts.store.messages(group)
	if m := msgs[0]; m.Kind != protocol.KindDeleted || m.SenderID != "" || m.Body != "" {
		t.Errorf("bob's group message is %+v, want a tombstone with no sender", m)
	}
	if last := msgs[len(msgs)-1]; last.Kind != protocol.KindSystem || last.SenderID != "" {
		t.Errorf("last group message %+v, want the system notice with no sender", last)
	}
	if got := alice.seqs(t, group); !slices.Equal(got, []int64{1, 2}) {
		t.Errorf("alice got group seqs %v, want the message and the notice", got)
	}
}

// TestDeleteMessage: the sender's delete tombstones the message for everyone and every member's
// devices, the sender's included, get one deleted push.
func TestDeleteMessage(t *testing.T) {
	ts := newTestService(t)
	alice := []*fakeConn{ts.connect("alice"), ts.connect("alice")}
	bob := ts.connect("bob")
	dm := ts.dm("alice", "bob")
	ts.send("alice", dm, "oops")
	ts.send("alice", dm, "fine")
	if err := ts.svc.DeleteMessage(ts.ctx, "alice", dm, 1); err != nil {
		t.Fatal(err)
	}
	for _, c := range append(alice, bob) {
		got := c.ofType(t, protocol.TypeDeleted)
		if len(got) != 1 || got[0].via != viaPush || got[0].frame.Seq != 1 || got[0].frame.UserID != "alice" {
			t.Errorf("%s got deleted pushes %+v, want one for seq 1", c.user, got)
		}
	}
	page, err := ts.svc.History(ts.ctx, "bob", dm, Anchor{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 2 || page.Messages[0].Kind != protocol.KindDeleted || page.Messages[0].Body != "" || page.Messages[1].Body != "fine" {
		t.Errorf("page after the delete %+v, want a tombstone at 1 and the message at 2", page.Messages)
	}
}

// TestHideConversation: hiding takes the conversation out of the user's list with everything
// read, their history starts after it, their devices get one hidden push; a newer message brings
// it back with only that unread.
func TestHideConversation(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	bob := []*fakeConn{ts.connect("bob"), ts.connect("bob")}
	dm := ts.dm("alice", "bob")
	for range 3 {
		ts.send("alice", dm, "m")
	}
	ts.bus.echo(2)
	if err := ts.svc.HideConversation(ts.ctx, "bob", dm); err != nil {
		t.Fatal(err)
	}
	ts.bus.echo(1)
	for i, c := range bob {
		if got := c.ofType(t, protocol.TypeHidden); len(got) != 1 || got[0].frame.Seq != 3 {
			t.Errorf("bob's connection %d got hidden pushes %+v, want one at 3", i, got)
		}
	}
	if views, _ := ts.svc.ListConversations(ts.ctx, "bob"); len(views) != 0 {
		t.Errorf("bob still lists %+v after hiding it", views)
	}
	page, err := ts.svc.History(ts.ctx, "bob", dm, Anchor{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 0 || page.FirstSeq != 0 || page.HasBefore {
		t.Errorf("bob's history after hiding: %+v, want empty with firstSeq 0", page)
	}
	if v := ts.conversation("alice", dm); v.LastSeq != 3 {
		t.Errorf("alice's view changed: %+v", v)
	}

	ts.send("alice", dm, "news")
	v := ts.conversation("bob", dm)
	if v.Unread != 1 || v.FirstSeq != 4 || v.LastSeq != 4 {
		t.Errorf("after a new message bob sees %+v, want firstSeq 4, unread 1", v)
	}
	page, err = ts.svc.History(ts.ctx, "bob", dm, Anchor{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 1 || page.Messages[0].Seq != 4 || page.FirstSeq != 4 || page.HasBefore {
		t.Errorf("bob's history after the new message: %+v, want only seq 4", page)
	}
}

// TestRemovedBeforeSync: messages held for a connection that has not synced yet are not given
// to it once its user is removed from their conversation; it sees removed, then nothing of it.
func TestRemovedBeforeSync(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	group := ts.group("alice", "bob")
	bob := ts.open("bob") // not synced: live pushes are held
	ts.send("alice", group, "held for bob")
	if err := ts.svc.RemoveMember(ts.ctx, "alice", group, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.svc.Sync(ts.ctx, bob, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := bob.seqs(t, group); len(got) > 0 {
		t.Errorf("bob got seqs %v of a group he was removed from", got)
	}
	if got := bob.ofType(t, protocol.TypeRemoved); len(got) != 1 {
		t.Errorf("bob got %d removed pushes, want 1", len(got))
	}
}
