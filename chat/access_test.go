package chat

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
)

// TestRefusals checks every operation's membership and authorization check: each refusal is of
// the kind the wire maps to a stable code, and a refused operation changes nothing anyone sees.
func TestRefusals(t *testing.T) {
	ts := newTestService(t)
	alice, bob, carol := ts.connect("alice"), ts.connect("bob"), ts.connect("carol")
	dm := ts.dm("alice", "bob")
	group := ts.group("alice", "bob") // alice created it; carol is in neither conversation
	ts.send("alice", dm, "hello bob")
	ts.send("bob", group, "hello team")
	// erin has no connection here: her reads come over HTTP and are checked against the store.

	type op func(ctx context.Context, s *Service) error
	cases := []struct {
		name string
		op   op
		want error
	}{
		{"send by a non-member", func(ctx context.Context, s *Service) error {
			_, err := s.Send(ctx, "carol", SendRequest{ConversationID: dm, ClientMsgID: "c1", Body: "hi"})
			return err
		}, protocol.ErrNotMember},
		{"send to no such conversation", func(ctx context.Context, s *Service) error {
			_, err := s.Send(ctx, "carol", SendRequest{ConversationID: "nope", ClientMsgID: "c2", Body: "hi"})
			return err
		}, protocol.ErrNotMember},
		{"history of a non-member", func(ctx context.Context, s *Service) error {
			_, err := s.History(ctx, "carol", dm, Anchor{}, 10)
			return err
		}, protocol.ErrNotMember},
		{"read by a connected non-member", func(ctx context.Context, s *Service) error {
			return s.Read(ctx, "carol", dm, 1)
		}, protocol.ErrNotMember},
		{"read over HTTP by a non-member", func(ctx context.Context, s *Service) error {
			return s.Read(ctx, "erin", dm, 1)
		}, protocol.ErrNotMember},
		{"read over HTTP of no such conversation", func(ctx context.Context, s *Service) error {
			return s.Read(ctx, "erin", "nope", 1)
		}, protocol.ErrNotMember},
		{"receipts of a non-member", func(ctx context.Context, s *Service) error {
			_, err := s.Receipts(ctx, "carol", dm, 1)
			return err
		}, protocol.ErrNotMember},
		{"typing by a non-member", func(_ context.Context, s *Service) error {
			return s.Typing("carol", dm)
		}, protocol.ErrNotMember},
		{"delete by a non-member", func(ctx context.Context, s *Service) error {
			return s.DeleteMessage(ctx, "carol", dm, 1)
		}, protocol.ErrNotMember},
		{"hide by a non-member", func(ctx context.Context, s *Service) error {
			return s.HideConversation(ctx, "carol", dm)
		}, protocol.ErrNotMember},
		{"a non-member adds herself", func(ctx context.Context, s *Service) error {
			return s.AddMembers(ctx, "carol", group, []string{"carol"})
		}, protocol.ErrNotMember},
		{"a non-member removes a member", func(ctx context.Context, s *Service) error {
			return s.RemoveMember(ctx, "carol", group, "bob")
		}, protocol.ErrNotMember},
		{"a non-member leaves", func(ctx context.Context, s *Service) error {
			return s.RemoveMember(ctx, "carol", group, "carol")
		}, protocol.ErrNotMember},
		{"delete another member's message", func(ctx context.Context, s *Service) error {
			return s.DeleteMessage(ctx, "bob", dm, 1)
		}, protocol.ErrForbidden},
		{"delete a seq that does not exist", func(ctx context.Context, s *Service) error {
			return s.DeleteMessage(ctx, "alice", dm, 99)
		}, protocol.ErrNotFound},
		{"receipts of a seq that does not exist", func(ctx context.Context, s *Service) error {
			_, err := s.Receipts(ctx, "alice", dm, 99)
			return err
		}, protocol.ErrNotFound},
		{"a non-creator removes someone else", func(ctx context.Context, s *Service) error {
			return s.RemoveMember(ctx, "bob", group, "alice")
		}, protocol.ErrForbidden},
		{"the creator removes a non-member", func(ctx context.Context, s *Service) error {
			return s.RemoveMember(ctx, "alice", group, "carol")
		}, protocol.ErrNotFound},
		{"add members to a DM", func(ctx context.Context, s *Service) error {
			return s.AddMembers(ctx, "alice", dm, []string{"carol"})
		}, protocol.ErrForbidden},
		{"remove a member of a DM", func(ctx context.Context, s *Service) error {
			return s.RemoveMember(ctx, "alice", dm, "bob")
		}, protocol.ErrForbidden},
		{"leave a DM", func(ctx context.Context, s *Service) error {
			return s.RemoveMember(ctx, "alice", dm, "alice")
		}, protocol.ErrForbidden},
		{"a DM with yourself", func(ctx context.Context, s *Service) error {
			_, err := s.OpenDM(ctx, "alice", "alice")
			return err
		}, protocol.ErrInvalid},
		{"a DM with an unknown user", func(ctx context.Context, s *Service) error {
			_, err := s.OpenDM(ctx, "alice", "ghost")
			return err
		}, protocol.ErrNotFound},
		{"a group with an unknown user", func(ctx context.Context, s *Service) error {
			_, err := s.CreateGroup(ctx, "alice", "x", []string{"bob", "ghost"})
			return err
		}, protocol.ErrNotFound},
		{"add an unknown user", func(ctx context.Context, s *Service) error {
			return s.AddMembers(ctx, "alice", group, []string{"carol", "ghost"})
		}, protocol.ErrNotFound},
	}

	before := map[*fakeConn]int{alice: alice.count(), bob: bob.count(), carol: carol.count()}
	requests, advances := len(ts.sender.sent()), len(ts.reads.advanced())
	convs := ts.store.conversations()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op(ts.ctx, ts.svc)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var refusal *protocol.Error
			if !errors.As(err, &refusal) {
				t.Fatalf("%v is not a *protocol.Error, so it would be answered as internal", err)
			}
		})
	}

	// Nothing refused reached a device, the sequencer, the read state or the store.
	for c, n := range before {
		if got := c.all(t)[n:]; len(got) > 0 {
			t.Errorf("%s's connection got frames from refused operations: %+v", c.user, got)
		}
	}
	// Changes of stored messages and of a group's members are judged by the conversation's
	// owner, which has the message and the group's roles as stored (and refused them above
	// storing nothing: no device got a frame); everything else is refused before it reaches the
	// sequencer.
	sent := slices.DeleteFunc(ts.sender.sent()[requests:], func(r sequencer.SendRequest) bool { return r.Op != "" || r.Group != nil })
	if len(sent) > 0 {
		t.Errorf("refused operations sent to the sequencer: %+v", sent)
	}
	if got := ts.reads.advanced()[advances:]; len(got) > 0 {
		t.Errorf("refused reads moved cursors: %+v", got)
	}
	if got := len(ts.store.messages(dm)); got != 1 {
		t.Errorf("the DM holds %d messages, want 1", got)
	}
	if c, _ := ts.store.conv(group); len(c.Members) != 2 {
		t.Errorf("the group's members changed: %v", c.Members)
	}
	if got := ts.store.conversations(); got != convs {
		t.Errorf("refused operations created conversations: %d, want %d", got, convs)
	}
}

// TestRefusalsAllowMembers runs the operations the refusals guard, as members, so a check that
// refuses everyone fails here.
func TestRefusalsAllowMembers(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	ts.connect("bob")
	dm := ts.dm("alice", "bob")
	group := ts.group("alice", "bob")
	ts.send("alice", dm, "hello")
	ts.send("bob", group, "hello")

	steps := []struct {
		name string
		op   func(ctx context.Context, s *Service) error
	}{
		{"history", func(ctx context.Context, s *Service) error {
			_, err := s.History(ctx, "bob", dm, Anchor{}, 10)
			return err
		}},
		{"read", func(ctx context.Context, s *Service) error { return s.Read(ctx, "bob", dm, 1) }},
		{"read in a group", func(ctx context.Context, s *Service) error { return s.Read(ctx, "bob", group, 1) }},
		{"receipts", func(ctx context.Context, s *Service) error { _, err := s.Receipts(ctx, "bob", dm, 1); return err }},
		{"typing", func(_ context.Context, s *Service) error { return s.Typing("bob", dm) }},
		{"the owner adds", func(ctx context.Context, s *Service) error {
			return s.AddMembers(ctx, "alice", group, []string{"carol"})
		}},
		{"delete own message", func(ctx context.Context, s *Service) error { return s.DeleteMessage(ctx, "alice", dm, 1) }},
		{"delete it twice", func(ctx context.Context, s *Service) error {
			if err := s.DeleteMessage(ctx, "alice", dm, 1); !errors.Is(err, protocol.ErrForbidden) {
				return errors.New("deleting a tombstone again: want forbidden, got " + errString(err))
			}
			return nil
		}},
		{"creator removes", func(ctx context.Context, s *Service) error { return s.RemoveMember(ctx, "alice", group, "carol") }},
		{"member leaves", func(ctx context.Context, s *Service) error { return s.RemoveMember(ctx, "bob", group, "bob") }},
		{"hide", func(ctx context.Context, s *Service) error { return s.HideConversation(ctx, "bob", dm) }},
		{"DM again", func(ctx context.Context, s *Service) error {
			c, err := s.OpenDM(ctx, "bob", "alice")
			if err == nil && c.ID != dm {
				return errors.New("the same pair got a second DM " + c.ID)
			}
			return err
		}},
	}
	for _, st := range steps {
		if err := st.op(ts.ctx, ts.svc); err != nil {
			t.Errorf("%s: %v", st.name, err)
		}
	}
	// Over HTTP: bob has no connection here, so the store says whether he is a member.
	for _, c := range ts.hub.Conns("bob") {
		ts.svc.Close(c)
	}
	if err := ts.svc.Read(ts.ctx, "bob", dm, 1); err != nil {
		t.Errorf("read over HTTP of a member not connected: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// TestSyncSkipsConversationsOfOthers: a sync naming a conversation the user is not in replays
// nothing of it and does not list it.
func TestSyncSkipsConversationsOfOthers(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	ts.connect("bob")
	dm := ts.dm("alice", "bob")
	for range 3 {
		ts.send("alice", dm, "secret")
	}
	carol := ts.open("carol")
	views, err := ts.svc.Sync(ts.ctx, carol, map[string]int64{dm: 0, "nope": 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := carol.ofType(t, protocol.TypeMessage); len(got) > 0 {
		t.Errorf("carol was replayed messages of a DM she is not in: %+v", got)
	}
	for _, v := range views {
		if v.ID == dm {
			t.Errorf("carol's synced list holds the DM of alice and bob")
		}
	}
}

// TestTooManyConnections: past MaxConnectionsPerUser a connection is refused; closing one makes
// room again, and other users are not counted.
func TestTooManyConnections(t *testing.T) {
	ts := newTestServiceWith(t, Config{MaxConnectionsPerUser: 3}, hubConfig{})
	var conns []*fakeConn
	for range 3 {
		conns = append(conns, ts.connect("alice"))
	}
	extra := &fakeConn{user: "alice"}
	if _, err := ts.svc.Open(ts.ctx, extra, nil); !errors.Is(err, protocol.ErrRateLimited) {
		t.Fatalf("fourth connection: got %v, want protocol.ErrRateLimited", err)
	}
	if got := ts.hub.Connections(); got != 3 {
		t.Fatalf("a refused connection was registered: %d connections, want 3", got)
	}
	ts.connect("bob") // bob's first is not refused for alice's
	ts.svc.Close(conns[0])
	ts.connect("alice")
}

// TestRemovedElsewhere: a member removed on another node whose event has not reached this one
// yet is refused by the operations that check the store: history and hiding.
func TestRemovedElsewhere(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	ts.connect("bob")
	group := ts.group("alice", "bob")
	ts.send("alice", group, "m")
	if err := ts.store.RemoveMember(ts.ctx, group, "bob"); err != nil { // the event is lost
		t.Fatal(err)
	}
	if _, err := ts.svc.History(ts.ctx, "bob", group, Anchor{}, 10); !errors.Is(err, protocol.ErrNotMember) {
		t.Errorf("history: got %v, want protocol.ErrNotMember", err)
	}
	if err := ts.svc.HideConversation(ts.ctx, "bob", group); !errors.Is(err, protocol.ErrNotMember) {
		t.Errorf("hide: got %v, want protocol.ErrNotMember", err)
	}
	if _, err := ts.svc.Send(ts.ctx, "bob", SendRequest{ConversationID: group, ClientMsgID: "b", Body: "hi"}); !errors.Is(err, protocol.ErrNotMember) {
		t.Errorf("send: got %v, want protocol.ErrNotMember (the sequencer knows)", err)
	}
}
