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
