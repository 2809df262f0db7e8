package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chatd/chatd/protocol"
)

// TestSendDeliversOncePerDevice: a member's send is acked with the next seq and moves the
// sender's cursor; every connection of every member here gets one push per seq, the same bytes
// everywhere, and no badge per message; the sender's own messages are never unread.
func TestSendDeliversOncePerDevice(t *testing.T) {
	ts := newTestService(t)
	members := map[string][]*fakeConn{
		"alice": {ts.connect("alice"), ts.connect("alice")},
		"bob":   {ts.connect("bob"), ts.connect("bob"), ts.connect("bob")},
		"carol": {ts.connect("carol")},
	}
	outsider := ts.connect("dave")
	group := ts.group("alice", "bob", "carol")
	for _, conns := range members {
		for _, c := range conns {
			c.forget()
		}
	}

	const n = 4
	for i := 1; i <= n; i++ {
		m := ts.send("alice", group, "message")
		if m.Seq != int64(i) || m.SenderID != "alice" || m.ConversationID != group || m.Kind != protocol.KindText {
			t.Fatalf("send %d acked with %+v, want seq %d from alice", i, m, i)
		}
		if cur, ok := ts.reads.pendingOf("alice", group); ok {
			t.Fatalf("after send %d alice has a pending cursor move %+v; her position is stored with the message", i, cur)
		}
	}

	want := []int64{1, 2, 3, 4}
	frames := make(map[int64][]byte)
	for user, conns := range members {
		for i, c := range conns {
			if got := c.seqs(t, group); !slices.Equal(got, want) {
				t.Errorf("%s's connection %d got seqs %v, want %v", user, i, got, want)
			}
			for _, p := range c.all(t) {
				switch p.frame.Type {
				case protocol.TypeMessage:
					if p.via != viaPush {
						t.Errorf("%s got a live message by %s, want push", user, p.via)
					}
					if first, ok := frames[p.frame.Seq]; !ok {
						frames[p.frame.Seq] = p.data
					} else if !bytes.Equal(first, p.data) {
						t.Errorf("seq %d was encoded differently for two sockets:\n%s\n%s", p.frame.Seq, first, p.data)
					}
				case protocol.TypeBadge:
					t.Errorf("%s got a badge for a message: %s", user, p.data)
				default:
					t.Errorf("%s got an unexpected %s frame: %s", user, p.frame.Type, p.data)
				}
			}
		}
	}
	if got := outsider.count(); got != 0 {
		t.Errorf("a non-member got %d frames", got)
	}

	if v := ts.conversation("alice", group); v.Unread != 0 || v.ReadSeq != n || v.LastSeq != n {
		t.Errorf("the sender sees %+v, want readSeq %d and unread 0", v, n)
	}
	for _, u := range []string{"bob", "carol"} {
		if v := ts.conversation(u, group); v.Unread != n || v.LastSeq != n {
			t.Errorf("%s sees %+v, want lastSeq %d and unread %d", u, v, n, n)
		}
	}
	// Bob reads two; his unread is the rest, and the sender's stays 0.
	if err := ts.svc.Read(ts.ctx, "bob", group, 2); err != nil {
		t.Fatal(err)
	}
	if v := ts.conversation("bob", group); v.Unread != n-2 || v.ReadSeq != 2 {
		t.Errorf("bob after reading 2 sees %+v, want unread %d", v, n-2)
	}
}

// TestSendRefusedAfterSequencerRefuses: the sequencer's word on membership is final (the owner
// may know of a removal before this node does) and reaches the client as the owner gave it, as
// does its refusal of a reply to no message; an unavailable sequencer is a retryable refusal that
// says to retry with the same clientMsgId. None moves the sender's cursor.
func TestSendRefusedAfterSequencerRefuses(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	dm := ts.dm("alice", "bob")
	for _, tc := range []struct {
		fail error
		want protocol.Error // as the error frame carries it
	}{
		{&protocol.Error{Code: protocol.CodeNotMember, Message: protocol.ErrNotMember.Message},
			protocol.Error{Code: protocol.CodeNotMember, Message: "no such conversation, or you are not a member"}},
		{protocol.Refuse(protocol.ErrNotFound, "no message 9 in this conversation"),
			protocol.Error{Code: protocol.CodeNotFound, Message: "no message 9 in this conversation"}},
		{fmt.Errorf("request chat.seq.3: %w (nats: timeout)", protocol.ErrUnavailable),
			protocol.Error{Code: protocol.CodeUnavailable, Message: "message not stored; retry with the same clientMsgId", Retryable: true}},
	} {
		ts.sender.mu.Lock()
		ts.sender.fail = tc.fail
		ts.sender.mu.Unlock()
		_, err := ts.svc.Send(ts.ctx, "alice", SendRequest{ConversationID: dm, ClientMsgID: "x", Body: "hi"})
		if got := protocol.AsError(err); *got != tc.want {
			t.Errorf("sequencer says %v: got %+v, want %+v", tc.fail, *got, tc.want)
		}
	}
	if got := ts.reads.advanced(); len(got) > 0 {
		t.Errorf("a refused send moved cursors: %+v", got)
	}
}

// TestSyncReplaysThenReleasesLive: a connection that has not synced holds its live pushes; its
// sync replays the stored messages after what the client holds and then releases the held ones,
// so it sees each seq once and in order, whether a held message was also in the replay (the
// default limit) or only arrives live (a limit of 3). A republished or older seq is not pushed
// again, nor by a second sync.
func TestSyncReplaysThenReleasesLive(t *testing.T) {
	for _, tc := range []struct {
		name     string
		limit    int
		replayed int64 // the highest seq the replay gives; the rest come live
	}{
		{"held messages replayed too", 0, 9},
		{"held messages only live", 3, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServiceWith(t, Config{SyncLimit: tc.limit}, hubConfig{})
			ts.connect("alice")
			dm := ts.dm("alice", "bob")
			for range 5 {
				ts.send("alice", dm, "before bob connected")
			}

			bob := ts.open("bob") // not synced yet
			var stored []protocol.Message
			for range 3 {
				stored = append(stored, ts.send("alice", dm, "live"))
			}
			if got := bob.seqs(t, dm); len(got) > 0 {
				t.Fatalf("bob got %v before syncing; live pushes must wait for the sync", got)
			}

			// While the sync reads the store, one more message arrives live.
			replaying := 0
			ts.store.mu.Lock()
			ts.store.beforeRange = func(convID string, from, to int64) {
				if replaying++; replaying == 1 {
					stored = append(stored, ts.send("alice", dm, "during the replay"))
				}
			}
			ts.store.mu.Unlock()
			views, err := ts.svc.Sync(ts.ctx, bob, map[string]int64{dm: 2}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ts.store.mu.Lock()
			ts.store.beforeRange = nil
			ts.store.mu.Unlock()

			want := []int64{3, 4, 5, 6, 7, 8, 9}
			if got := bob.seqs(t, dm); !slices.Equal(got, want) {
				t.Fatalf("bob saw seqs %v, want %v", got, want)
			}
			for _, p := range bob.ofType(t, protocol.TypeMessage) {
				if replayed := p.frame.Seq <= tc.replayed; replayed != (p.via == viaWait) {
					t.Errorf("seq %d came by %s; replayed messages (up to %d) wait for room, live ones are pushed",
						p.frame.Seq, p.via, tc.replayed)
				}
			}
			if len(views) != 1 || views[0].ID != dm || views[0].LastSeq != 9 {
				t.Errorf("synced list %+v, want the DM at lastSeq 9", views)
			}

			// The owner republishes a message after a failover, and an old one arrives late.
			for _, m := range []protocol.Message{stored[1], stored[3], stored[0]} {
				data, err := json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				ts.svc.HandleMessage(dm, data, time.Now())
			}
			if got := bob.seqs(t, dm); !slices.Equal(got, want) {
				t.Errorf("after republishing, bob saw seqs %v, want %v", got, want)
			}

			// A second sync replays only what this connection has not been given.
			if _, err := ts.svc.Sync(ts.ctx, bob, map[string]int64{dm: 0}, nil); err != nil {
				t.Fatal(err)
			}
			if got := bob.seqs(t, dm); !slices.Equal(got, want) {
				t.Errorf("after a second sync, bob saw seqs %v, want %v", got, want)
			}
		})
	}
}

// TestSyncLimit: a sync replays at most SyncLimit messages per conversation; the synced list
// tells the client the rest is there to page.
func TestSyncLimit(t *testing.T) {
	ts := newTestServiceWith(t, Config{SyncLimit: 3}, hubConfig{})
	ts.connect("alice")
	dm := ts.dm("alice", "bob")
	for range 10 {
		ts.send("alice", dm, "m")
	}
	bob := ts.open("bob")
	views, err := ts.svc.Sync(ts.ctx, bob, map[string]int64{dm: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := bob.seqs(t, dm); !slices.Equal(got, []int64{5, 6, 7}) {
		t.Errorf("bob was replayed %v, want 5..7", got)
	}
	if len(views) != 1 || views[0].LastSeq != 10 {
		t.Errorf("synced list %+v, want lastSeq 10", views)
	}
}
