package chat

import (
	"encoding/json"
	"testing"

	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
)

// openCounting registers a new connection of user and returns it with the total unread its
// connect badge carries.
func (ts *testService) openCounting(user string) (*fakeConn, int64) {
	ts.t.Helper()
	c := &fakeConn{user: user}
	total, err := ts.svc.Open(ts.ctx, c, nil)
	if err != nil {
		ts.t.Fatalf("open %s: %v", user, err)
	}
	ts.mu.Lock()
	ts.conns = append(ts.conns, c)
	ts.mu.Unlock()
	return c, total
}

// lastBadge returns the last badge frame c got for convID.
func lastBadge(t *testing.T, c *fakeConn, convID string) protocol.ServerFrame {
	t.Helper()
	var last *protocol.ServerFrame
	for _, p := range c.ofType(t, protocol.TypeBadge) {
		if p.frame.ConversationID == convID {
			last = &p.frame
		}
	}
	if last == nil || last.Unread == nil || last.Total == nil {
		t.Fatalf("%s got no badge for %s: %+v", c.user, convID, c.all(t))
	}
	return *last
}

// TestUnreadAfterDeletesForEveryone: alice sends 5, bob reads 2, alice deletes 4 (after bob's
// position) and 1 (before it): bob's unread is 2 (seqs 3 and 5) in his list, in /api/badge's
// count, in his badges and on every connect; alice's own messages stay read to her.
func TestUnreadAfterDeletesForEveryone(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	bob := ts.connect("bob")
	dm := ts.dm("alice", "bob")
	for range 5 {
		ts.send("alice", dm, "m")
	}
	if err := ts.svc.Read(ts.ctx, "bob", dm, 2); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []int64{4, 1} {
		if err := ts.svc.DeleteMessage(ts.ctx, "alice", dm, seq); err != nil {
			t.Fatal(err)
		}
	}
	if v := ts.conversation("bob", dm); v.Unread != 2 || v.ReadSeq != 2 || v.LastSeq != 5 {
		t.Errorf("bob's list says %+v; want unread 2 (seqs 3 and 5), readSeq 2, lastSeq 5", v)
	}
	if v := ts.conversation("alice", dm); v.Unread != 0 {
		t.Errorf("alice's list says unread %d; her own messages are never unread", v.Unread)
	}
	if total, err := ts.svc.Badge(ts.ctx, "bob"); err != nil || total.Unread != 2 {
		t.Errorf("bob's badge from the store: %d, %v; want 2", total, err)
	}
	// A second device: its connect badge is counted from this node's memory.
	phone, total := ts.openCounting("bob")
	if total != 2 {
		t.Errorf("bob's second device connects with total %d; want 2", total)
	}
	// A read moves the badge: 3 read, 4 deleted, 5 unread.
	if err := ts.svc.Read(ts.ctx, "bob", dm, 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*fakeConn{bob, phone} {
		if b := lastBadge(t, c, dm); *b.Unread != 1 || *b.Total != 1 || b.ReadSeq != 3 || b.LastSeq != 5 {
			t.Errorf("bob's badge after reading 3: unread %d total %d readSeq %d lastSeq %d; want 1, 1, 3, 5",
				*b.Unread, *b.Total, b.ReadSeq, b.LastSeq)
		}
	}
	// Reconnect: every connection gone, then a fresh one loads the state from the store.
	ts.svc.Close(bob)
	ts.svc.Close(phone)
	if got := ts.svc.deleted.of(dm); len(got) != 2 || got[0] != 1 || got[1] != 4 {
		t.Errorf("with alice still here the node must keep the DM's deletions [1 4]: kept %v", got)
	}
	if _, total := ts.openCounting("bob"); total != 1 {
		t.Errorf("bob reconnects with total %d; want 1 (seq 5)", total)
	}
}

// TestDeletionHeardFromAnotherNode: a deletion made on another node reaches this one only as the
// owner's change event; the badges counted here leave it out from then on.
func TestDeletionHeardFromAnotherNode(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	bob := ts.connect("bob")
	dm := ts.dm("alice", "bob")
	for range 5 {
		ts.send("alice", dm, "m")
	}
	// The owner, on another node, deleted seq 4 in the store and published the change.
	if err := ts.store.DeleteMessage(ts.ctx, dm, 4, "alice"); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(sequencer.Change{Op: message.OpDelete, ConversationID: dm, Seq: 4, Version: 1, UserID: "alice", Members: 2})
	if err != nil {
		t.Fatal(err)
	}
	ts.svc.HandleChange(dm, data)
	if got := bob.ofType(t, protocol.TypeDeleted); len(got) != 1 || got[0].frame.Seq != 4 {
		t.Errorf("bob got deleted pushes %+v; want one for seq 4", got)
	}
	if err := ts.svc.Read(ts.ctx, "bob", dm, 2); err != nil {
		t.Fatal(err)
	}
	if b := lastBadge(t, bob, dm); *b.Unread != 2 || *b.Total != 2 {
		t.Errorf("bob's badge after reading 2 of 5 with 4 deleted: unread %d total %d; want 2, 2", *b.Unread, *b.Total)
	}
	// Repeated (the bus may deliver twice): counted once.
	ts.svc.HandleChange(dm, data)
	if _, total := ts.openCounting("bob"); total != 2 {
		t.Errorf("after the event twice bob's next device connects with total %d; want 2", total)
	}
}

// TestJoinerUnreadLeavesOutDeletions: a member added to a group with deletions sees them left
// out of unread in the conversation push and badge of the join, and in their list.
func TestJoinerUnreadLeavesOutDeletions(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	ts.connect("bob")
	carol := ts.connect("carol")
	group := ts.group("alice", "bob")
	for range 4 {
		ts.send("alice", group, "m")
	}
	for _, seq := range []int64{2, 3} {
		if err := ts.svc.DeleteMessage(ts.ctx, "alice", group, seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts.svc.AddMembers(ts.ctx, "alice", group, []string{"carol"}); err != nil {
		t.Fatal(err)
	}
	// Seqs 1..4, 2 and 3 deleted, 5 the announcement: 3 unread.
	var view *protocol.Conversation
	for _, p := range carol.ofType(t, protocol.TypeConversation) {
		if p.frame.Conversation != nil && p.frame.Conversation.ID == group {
			view = p.frame.Conversation
		}
	}
	if view == nil || view.Unread != 3 || view.LastSeq != 5 {
		t.Errorf("carol's conversation push: %+v; want lastSeq 5, unread 3", view)
	}
	if b := lastBadge(t, carol, group); *b.Unread != 3 || *b.Total != 3 {
		t.Errorf("carol's badge on joining: unread %d total %d; want 3, 3", *b.Unread, *b.Total)
	}
	if v := ts.conversation("carol", group); v.Unread != 3 {
		t.Errorf("carol's list says unread %d; want 3", v.Unread)
	}
}

// TestJoinHeardFromAnotherNode: a member added on another node to a group nobody here is in
// learns its deletions from the join event: the join's badge and later totals leave them out.
func TestJoinHeardFromAnotherNode(t *testing.T) {
	ts := newTestService(t)
	alice := ts.connect("alice")
	group := ts.group("alice", "bob")
	for range 4 {
		ts.send("alice", group, "m")
	}
	for _, seq := range []int64{2, 3} {
		if err := ts.svc.DeleteMessage(ts.ctx, "alice", group, seq); err != nil {
			t.Fatal(err)
		}
	}
	ts.svc.Close(alice) // nobody here is in the group now
	carol := ts.connect("carol")
	// Another node added carol: the store has her, and this node hears the join.
	if err := ts.store.AddMembers(ts.ctx, group, []string{"carol"}); err != nil {
		t.Fatal(err)
	}
	c, _ := ts.store.conv(group)
	view := toView(c, position{}, c.LastSeq)
	data, err := json.Marshal(userEvent{Type: userJoined, Conversation: &view, DeletedSeqs: c.DeletedSeqs})
	if err != nil {
		t.Fatal(err)
	}
	ts.svc.HandleUserEvent("carol", data)
	if b := lastBadge(t, carol, group); *b.Unread != 2 || *b.Total != 2 {
		t.Errorf("carol's badge on joining 4 messages with 2 deleted: unread %d total %d; want 2, 2", *b.Unread, *b.Total)
	}
	if _, total := ts.openCounting("carol"); total != 2 {
		t.Errorf("carol's next device connects with total %d; want 2", total)
	}
}

// TestHiddenThenDeleted: a conversation hidden and brought back by a new message shows that one
// unread; when its sender deletes it, nothing is unread and nothing before the hide comes back.
func TestHiddenThenDeleted(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	ts.connect("bob")
	dm := ts.dm("alice", "bob")
	for range 3 {
		ts.send("alice", dm, "m")
	}
	if err := ts.svc.HideConversation(ts.ctx, "bob", dm); err != nil {
		t.Fatal(err)
	}
	if err := ts.svc.DeleteMessage(ts.ctx, "alice", dm, 2); err != nil { // hidden already: no change
		t.Fatal(err)
	}
	ts.send("alice", dm, "news")
	if v := ts.conversation("bob", dm); v.Unread != 1 || v.FirstSeq != 4 {
		t.Errorf("bob after the new message: %+v; want firstSeq 4, unread 1", v)
	}
	if err := ts.svc.DeleteMessage(ts.ctx, "alice", dm, 4); err != nil {
		t.Fatal(err)
	}
	if v := ts.conversation("bob", dm); v.Unread != 0 || v.ReadSeq != 3 {
		t.Errorf("bob after the new message was deleted: %+v; want unread 0, readSeq 3", v)
	}
	if _, total := ts.openCounting("bob"); total != 0 {
		t.Errorf("bob's next device connects with total %d; want 0", total)
	}
}

// TestAccountDeletionTombstonesAreNotUnread: a member's account deletion turns their group
// messages into tombstones; they leave the other members' unread, here and in the store.
func TestAccountDeletionTombstonesAreNotUnread(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	ts.connect("bob")
	ts.connect("carol")
	group := ts.group("alice", "bob", "carol")
	ts.send("carol", group, "one")
	ts.send("alice", group, "two")
	ts.send("carol", group, "three")
	if err := ts.svc.DeleteAccount(ts.ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	// Seqs 1 and 3 are tombstones now; 2 and the announcement (4) are unread to bob.
	if c, _ := ts.store.conv(group); c.DeletedCount != 2 || len(c.DeletedSeqs) != 2 {
		t.Errorf("the group records %d tombstones %v; want 2", c.DeletedCount, c.DeletedSeqs)
	}
	// Counted from this node's memory first (a list would mend it from the store), then listed.
	if _, total := ts.openCounting("bob"); total != 2 {
		t.Errorf("bob's next device connects with total %d; want 2", total)
	}
	if v := ts.conversation("bob", group); v.Unread != 2 {
		t.Errorf("bob's list says unread %d; want 2", v.Unread)
	}
}

// TestLegacyTombstonesCountAsUnread: a conversation stored before deletedSeqs existed counts
// its tombstones (known only by deletedCount) as unread, as documented; new deletions do not.
func TestLegacyTombstonesCountAsUnread(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	ts.connect("bob")
	dm := ts.dm("alice", "bob")
	for range 3 {
		ts.send("alice", dm, "m")
	}
	ts.store.mu.Lock()
	ts.store.msgs[dm][1].Kind, ts.store.msgs[dm][1].Body = protocol.KindDeleted, ""
	c := ts.store.convs[dm]
	c.DeletedCount = 1 // a tombstone at seq 2, made before its seq was recorded
	ts.store.convs[dm] = c
	ts.store.mu.Unlock()
	if v := ts.conversation("bob", dm); v.Unread != 3 {
		t.Errorf("bob's list says unread %d; want 3 (the legacy tombstone counts)", v.Unread)
	}
	if err := ts.svc.DeleteMessage(ts.ctx, "alice", dm, 3); err != nil {
		t.Fatal(err)
	}
	if v := ts.conversation("bob", dm); v.Unread != 2 {
		t.Errorf("bob's list after a new deletion says unread %d; want 2", v.Unread)
	}
	if c, _ := ts.store.conv(dm); c.DeletedCount != 2 || len(c.DeletedSeqs) != 1 {
		t.Errorf("the DM records count %d, seqs %v; want 2 and [3]", c.DeletedCount, c.DeletedSeqs)
	}
}

// TestDeletionsAreForgottenWithTheLastMember: once nobody here is in a conversation, the node
// keeps nothing of its deletions; a member connecting again counts them from the store at once.
func TestDeletionsAreForgottenWithTheLastMember(t *testing.T) {
	ts := newTestService(t)
	alice, bob := ts.connect("alice"), ts.connect("bob")
	dm := ts.dm("alice", "bob")
	ts.send("alice", dm, "m")
	ts.send("alice", dm, "m")
	if err := ts.svc.DeleteMessage(ts.ctx, "alice", dm, 1); err != nil {
		t.Fatal(err)
	}
	if got := ts.svc.deleted.of(dm); len(got) != 1 || got[0] != 1 {
		t.Fatalf("the node knows deletions %v of the live DM; want [1]", got)
	}
	ts.svc.Close(alice)
	ts.svc.Close(bob)
	if got := ts.svc.deleted.of(dm); got != nil {
		t.Errorf("with nobody here the node still keeps deletions %v", got)
	}
	// Back again: learned from the store on connect, before any list or sync.
	if _, total := ts.openCounting("bob"); total != 1 {
		t.Errorf("bob reconnects to a node that knows nothing of the DM with total %d; want 1 (seq 2)", total)
	}
	if got := ts.svc.deleted.of(dm); len(got) != 1 || got[0] != 1 {
		t.Errorf("after bob's reconnect the node knows deletions %v; want [1]", got)
	}
}

// TestMissedDeletionsAreMended: a deletion whose event this node missed (published while it was
// cut off from NATS) is learned from the store by the resync after the reconnect, and by the
// member's next list; the badges counted here leave it out from then on.
func TestMissedDeletionsAreMended(t *testing.T) {
	for _, tc := range []struct {
		name string
		mend func(ts *testService, dm string)
	}{
		{"resync", func(ts *testService, _ string) { ts.svc.Resync(ts.ctx) }},
		{"list", func(ts *testService, dm string) { ts.conversation("bob", dm) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestService(t)
			ts.connect("alice")
			bob := ts.connect("bob")
			dm := ts.dm("alice", "bob")
			for range 5 {
				ts.send("alice", dm, "m")
			}
			if err := ts.store.DeleteMessage(ts.ctx, dm, 4, "alice"); err != nil { // no event heard
				t.Fatal(err)
			}
			tc.mend(ts, dm)
			if err := ts.svc.Read(ts.ctx, "bob", dm, 2); err != nil {
				t.Fatal(err)
			}
			if b := lastBadge(t, bob, dm); *b.Unread != 2 || *b.Total != 2 {
				t.Errorf("bob's badge after reading 2 of 5 with 4 deleted: unread %d total %d; want 2, 2", *b.Unread, *b.Total)
			}
		})
	}
}

// TestDeletionCountsAtOnceOnItsNode: on the node that made a deletion, the members' badges
// leave it out before its event has come back over the bus.
func TestDeletionCountsAtOnceOnItsNode(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	bob := ts.connect("bob")
	dm := ts.dm("alice", "bob")
	for range 5 {
		ts.send("alice", dm, "m")
	}
	ts.bus.hold()
	defer ts.bus.release()
	if err := ts.svc.DeleteMessage(ts.ctx, "alice", dm, 4); err != nil {
		t.Fatal(err)
	}
	if err := ts.svc.Read(ts.ctx, "bob", dm, 2); err != nil {
		t.Fatal(err)
	}
	if b := lastBadge(t, bob, dm); *b.Unread != 2 || *b.Total != 2 {
		t.Errorf("bob's badge after reading 2 of 5 with 4 just deleted: unread %d total %d; want 2, 2", *b.Unread, *b.Total)
	}
}
