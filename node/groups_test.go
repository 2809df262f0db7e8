package node_test

import (
	"slices"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// The tests in this file prove running a group over two nodes (real NATS, the store over TCP,
// real WebSockets): every rule is checked by the conversation's owner, whichever node a request
// comes from, and every change reaches every member's devices as a system message.

// grRequest makes one request of c and returns the reply and the refusal, if any.
func grRequest(t *testing.T, c *client.Conn, f protocol.ClientFrame) (protocol.ServerFrame, error) {
	t.Helper()
	return c.Request(ctxT(t, 10*time.Second), f)
}

// grModerate asks for one moderate action of conv.
func grModerate(t *testing.T, c *client.Conn, conv string, f protocol.ClientFrame) error {
	t.Helper()
	f.Type, f.ConversationID = protocol.TypeModerate, conv
	_, err := grRequest(t, c, f)
	return err
}

// grSystem waits until c gets the system message body of conv.
func grSystem(t *testing.T, c *client.Conn, conv, body string) protocol.ServerFrame {
	t.Helper()
	return testenv.Push(t, c, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeMessage && f.ConversationID == conv && f.Kind == protocol.KindSystem && f.Body == body
	})
}

// grView is conv as c's user lists it.
func grView(t *testing.T, c *client.Conn, conv string) protocol.Conversation {
	t.Helper()
	r, err := grRequest(t, c, protocol.ClientFrame{Type: protocol.TypeListConversations})
	if err != nil {
		t.Fatalf("list conversations: %v", err)
	}
	for _, v := range r.Conversations {
		if v.ID == conv {
			if v.Group == nil {
				t.Fatalf("the view of group %s has no group info", conv)
			}
			return v
		}
	}
	t.Fatalf("%s is not listed", conv)
	return protocol.Conversation{}
}

// grGroup starts two nodes, connects alice (the owner) on the first and the others alternately on
// the second and the first, and has alice create a group of them all.
func grGroup(t *testing.T, others ...string) ([]*testenv.Node, map[string]*client.Conn, protocol.Conversation) {
	t.Helper()
	_, nodes := rtNodes(t, 2, nil)
	conns := map[string]*client.Conn{"alice": connectReady(t, nodes[0], "alice")}
	members := make(map[string]*client.Conn)
	for i, name := range others {
		conns[name] = connectReady(t, nodes[(i+1)%2], name)
		members[name] = conns[name]
	}
	return nodes, conns, openGroup(t, conns["alice"], members)
}

// TestGroupRolesAcrossNodes: a plain member's add, remove, pin, rename and deletion of another's
// message are refused as forbidden with the reason; once the owner makes them an admin (from the
// other node) each works and every member's devices hear of it; the tombstone of an admin's
// deletion names the admin; demoted, their very next change is refused.
func TestGroupRolesAcrossNodes(t *testing.T) {
	nodes, c, g := grGroup(t, "bob", "carol", "dave")
	alice, bob, carol, dave := c["alice"], c["bob"], c["carol"], c["dave"] // bob and dave on node B
	login(t, nodes[1], "erin")
	ctx := ctxT(t, time.Minute)
	said, err := carol.Send(ctx, g.ID, "carol's message")
	if err != nil {
		t.Fatal(err)
	}
	if v := grView(t, dave, g.ID); v.Group.Owner != "alice" || len(v.Group.Admins) != 0 {
		t.Fatalf("dave sees roles %+v; want alice the owner and no admins", v.Group)
	}

	refused := []struct {
		what   string
		f      protocol.ClientFrame
		reason string
	}{
		{"add", protocol.ClientFrame{Type: protocol.TypeAddMembers, Members: []string{"erin"}}, "only the group's admins can add members"},
		{"remove", protocol.ClientFrame{Type: protocol.TypeRemoveMember, UserID: "dave"}, "only the group's admins can remove members"},
		{"pin", protocol.ClientFrame{Type: protocol.TypeModerate, Action: protocol.ActionPin, Seq: said.Seq}, "only the group's admins can pin messages"},
		{"rename", protocol.ClientFrame{Type: protocol.TypeModerate, Action: protocol.ActionRename, Name: "bob's"}, "only the group's admins can rename the group"},
		{"delete carol's message", protocol.ClientFrame{Type: protocol.TypeDeleteMessage, Seq: said.Seq}, "message 1 is not yours to delete"},
	}
	for _, r := range refused {
		r.f.ConversationID = g.ID
		_, err := grRequest(t, bob, r.f)
		wantRefusal(t, "bob, a member, "+r.what, err, protocol.CodeForbidden, r.reason)
	}

	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionPromote, UserID: "bob"}); err != nil {
		t.Fatalf("alice promotes bob: %v", err)
	}
	for _, m := range []*client.Conn{alice, bob, carol, dave} {
		grSystem(t, m, g.ID, "alice made bob an admin")
	}
	allowed := []protocol.ClientFrame{
		{Type: protocol.TypeAddMembers, Members: []string{"erin"}},
		{Type: protocol.TypeRemoveMember, UserID: "dave"},
		{Type: protocol.TypeModerate, Action: protocol.ActionPin, Seq: said.Seq},
		{Type: protocol.TypeModerate, Action: protocol.ActionRename, Name: "bob's"},
		{Type: protocol.TypeDeleteMessage, Seq: said.Seq},
	}
	for _, f := range allowed {
		f.ConversationID = g.ID
		if _, err := grRequest(t, bob, f); err != nil {
			t.Fatalf("bob, an admin, %s %s: %v", f.Type, f.Action, err)
		}
	}
	for _, body := range []string{"bob added erin", "bob removed dave", "bob pinned message 1", `bob renamed the group to "bob's"`} {
		grSystem(t, carol, g.ID, body)
	}
	testenv.Push(t, dave, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeRemoved && f.ConversationID == g.ID
	})
	_, err = dave.Send(ctx, g.ID, "still here?")
	wantCode(t, "dave after his removal", err, protocol.CodeNotMember)
	deleted := testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeDeleted && f.ConversationID == g.ID && f.Seq == said.Seq
	})
	if deleted.UserID != "bob" {
		t.Errorf("the deleted frame names %q; want bob, the admin", deleted.UserID)
	}
	page, err := grRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeHistory, ConversationID: g.ID})
	if err != nil {
		t.Fatal(err)
	}
	if m := page.Messages[said.Seq-1]; m.Kind != protocol.KindDeleted || m.RemovedBy != "bob" || m.SenderID != "carol" {
		t.Errorf("history has carol's message as %+v; want a tombstone of carol's, removed by bob", m)
	}
	if v := grView(t, carol, g.ID); v.Name != "bob's" || !slices.Equal(v.Group.Admins, []string{"bob"}) ||
		!slices.Equal(v.Group.Pins, []int64{said.Seq}) || !slices.Contains(v.Members, "erin") || slices.Contains(v.Members, "dave") {
		t.Errorf("carol's view: name %q, members %v, group %+v; want bob's, erin in, dave out, bob an admin, message 1 pinned", v.Name, v.Members, v.Group)
	}

	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionDemote, UserID: "bob"}); err != nil {
		t.Fatalf("alice demotes bob: %v", err)
	}
	err = grModerate(t, bob, g.ID, protocol.ClientFrame{Action: protocol.ActionRename, Name: "mine"})
	wantRefusal(t, "bob's rename right after his demotion, on the other node", err, protocol.CodeForbidden, "only the group's admins can rename the group")
	_, err = grRequest(t, bob, protocol.ClientFrame{Type: protocol.TypeRemoveMember, ConversationID: g.ID, UserID: "erin"})
	wantRefusal(t, "bob's removal after his demotion", err, protocol.CodeForbidden, "only the group's admins can remove members")
	_, err = grRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeLeave, ConversationID: g.ID})
	wantRefusal(t, "the owner leaving", err, protocol.CodeForbidden, "hand the group over to another member before leaving: you are its owner")
	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionTransfer, UserID: "carol"}); err != nil {
		t.Fatalf("alice hands over to carol: %v", err)
	}
	if _, err := grRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeLeave, ConversationID: g.ID}); err != nil {
		t.Fatalf("alice leaving once carol owns the group: %v", err)
	}
	if v := grView(t, bob, g.ID); v.Group.Owner != "carol" || len(v.Group.Admins) != 0 {
		t.Errorf("bob's view after the handover and alice's leaving: %+v; want carol the owner, no admins", v.Group)
	}
}
