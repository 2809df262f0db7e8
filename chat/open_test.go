package chat

import (
	"sync"
	"testing"

	"github.com/chatd/chatd/protocol"
)

// TestMembershipChangesWhileConnecting: a group created, and a group left, while a user's first
// connection is reading their conversations take effect on that connection; neither is lost nor
// undone by the read.
func TestMembershipChangesWhileConnecting(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	old := ts.group("alice", "carol")
	var once sync.Once
	var created string
	ts.store.afterConversationsOf = func(user string) {
		if user != "carol" {
			return
		}
		once.Do(func() {
			created = ts.group("alice", "carol") // after carol's read: her load does not have it
			if err := ts.svc.RemoveMember(ts.ctx, "alice", old, "carol"); err != nil {
				t.Errorf("remove carol: %v", err)
			}
		})
	}
	carol := ts.connect("carol")
	m := ts.send("alice", created, "hi carol")
	if _, err := ts.svc.Send(ts.ctx, "carol", SendRequest{ConversationID: created, ClientMsgID: "c1", Body: "hi"}); err != nil {
		t.Fatalf("carol sends to the group created while she connected: %v", err)
	}
	if got := carol.seqs(t, created); len(got) != 2 || got[0] != m.Seq {
		t.Fatalf("carol got seqs %v of the new group; want [%d %d]", got, m.Seq, m.Seq+1)
	}
	if _, err := ts.svc.History(ts.ctx, "carol", old, Anchor{}, 10); err == nil {
		t.Fatal("carol still reads the group she was removed from while connecting")
	}
	ts.send("alice", old, "after carol left")
	if got := carol.seqs(t, old); len(got) != 0 {
		t.Fatalf("carol got seqs %v of the group she left", got)
	}
	if n := len(carol.ofType(t, protocol.TypeConversation)); n != 1 {
		t.Fatalf("carol got %d conversation frames; want 1, for the new group", n)
	}
}

// TestNewUsersFirstConnectReadsItsConversationsOnce: a user in no conversation connects and syncs
// with one read of their conversations and none of their read positions; once they join a group,
// a list reads the store again and shows it, and so does a later list without a join (the mend
// of a join this node missed).
func TestNewUsersFirstConnectReadsItsConversationsOnce(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	count := func() (int, int) {
		ts.store.mu.Lock()
		defer ts.store.mu.Unlock()
		return ts.store.conversationsReads, ts.store.cursorsReads
	}
	convs0, cursors0 := count() // alice's connect's
	reads := func() (int, int) {
		convs, cursors := count()
		return convs - convs0, cursors - cursors0
	}
	ts.connect("dave")
	if convs, cursors := reads(); convs != 1 || cursors != 0 {
		t.Fatalf("dave's first connect and sync read his conversations %d times and his cursors %d times; want 1 and 0", convs, cursors)
	}
	if list, err := ts.svc.ListConversations(ts.ctx, "dave"); err != nil || len(list) != 0 {
		t.Fatalf("dave's second list: %v, %v; want none", list, err)
	}
	if convs, _ := reads(); convs != 2 {
		t.Fatalf("dave's second list read his conversations %d times in all; want 2 (the mend)", convs)
	}
	g := ts.group("alice", "dave")
	list, err := ts.svc.ListConversations(ts.ctx, "dave")
	if err != nil || len(list) != 1 || list[0].ID != g {
		t.Fatalf("dave's list after joining %s: %v, %v", g, list, err)
	}
}
