package node_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chatd/chatd/client"
	"github.com/chatd/chatd/node"
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
	_, nodes := rtNodes(t, 2, func(c *node.Config) { c.AdminSecret = []byte(adminSecret) })
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

// TestGroupModerationAcrossNodes: a banned member is removed and cannot be added back until
// unbanned; slow mode refuses a member's second message within its interval with retryAfterMs,
// not an admin's; an announcement group refuses members' messages but not their reactions; a
// muted member reads but cannot send until unmuted. Members are on the other node from alice.
func TestGroupModerationAcrossNodes(t *testing.T) {
	_, c, g := grGroup(t, "bob", "carol")
	alice, bob, carol := c["alice"], c["bob"], c["carol"] // bob on node B, carol on node A
	ctx := ctxT(t, time.Minute)

	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionBan, UserID: "carol"}); err != nil {
		t.Fatalf("alice bans carol: %v", err)
	}
	testenv.Push(t, carol, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeRemoved && f.ConversationID == g.ID
	})
	grSystem(t, bob, g.ID, "alice banned carol")
	_, err := grRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeAddMembers, ConversationID: g.ID, Members: []string{"carol"}})
	wantRefusal(t, "adding banned carol back", err, protocol.CodeForbidden, "carol is banned from this group")
	if v := grView(t, bob, g.ID); !slices.Equal(v.Group.Banned, []string{"carol"}) || slices.Contains(v.Members, "carol") {
		t.Fatalf("bob's view after the ban: members %v, banned %v", v.Members, v.Group.Banned)
	}
	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionUnban, UserID: "carol"}); err != nil {
		t.Fatalf("alice unbans carol: %v", err)
	}
	if _, err := grRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeAddMembers, ConversationID: g.ID, Members: []string{"carol"}}); err != nil {
		t.Fatalf("adding carol back after the unban: %v", err)
	}

	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionSlowMode, Seconds: 30}); err != nil {
		t.Fatalf("alice turns slow mode on: %v", err)
	}
	if _, err := bob.Send(ctx, g.ID, "first"); err != nil {
		t.Fatalf("bob's first message in slow mode: %v", err)
	}
	r, err := bob.Send(ctx, g.ID, "second")
	pe := wantCode(t, "bob's second message within 30 s", err, protocol.CodeRateLimited)
	if r.RetryAfterMs <= 0 || r.RetryAfterMs > 30000 || !pe.Retryable {
		t.Errorf("slow mode refusal: retryAfterMs %d, retryable %v; want 1..30000, retryable", r.RetryAfterMs, pe.Retryable)
	}
	for i := range 2 {
		if _, err := alice.Send(ctx, g.ID, "admins are exempt"); err != nil {
			t.Fatalf("alice's message %d in slow mode: %v", i+1, err)
		}
	}
	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionSlowMode, Seconds: 0}); err != nil {
		t.Fatalf("alice turns slow mode off: %v", err)
	}

	on := true
	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionAnnouncement, Enabled: &on}); err != nil {
		t.Fatalf("alice makes an announcement group: %v", err)
	}
	_, err = bob.Send(ctx, g.ID, "may I?")
	wantRefusal(t, "bob's message in an announcement group", err, protocol.CodeForbidden, "only admins post in this announcement group")
	news, err := alice.Send(ctx, g.ID, "news")
	if err != nil {
		t.Fatalf("alice posts in her announcement group: %v", err)
	}
	if _, err := grRequest(t, bob, protocol.ClientFrame{Type: protocol.TypeReact, ConversationID: g.ID, Seq: news.Seq, Emoji: "👍"}); err != nil {
		t.Fatalf("bob reacts in an announcement group: %v", err)
	}
	off := false
	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionAnnouncement, Enabled: &off}); err != nil {
		t.Fatal(err)
	}

	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionMute, UserID: "bob", Seconds: 600}); err != nil {
		t.Fatalf("alice mutes bob: %v", err)
	}
	_, err = bob.Send(ctx, g.ID, "muted?")
	wantCode(t, "muted bob's message", err, protocol.CodeForbidden)
	grSystem(t, bob, g.ID, "alice muted bob for 600 seconds") // he still reads
	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionUnmute, UserID: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Send(ctx, g.ID, "thanks"); err != nil {
		t.Fatalf("bob after his unmute: %v", err)
	}
}

// TestGroupConcurrentPromoteAndRemove: the owner promotes carol on one node while an admin
// removes her on the other, many times over: the owner orders the two, so either she was removed
// (the promotion then refused: not in the group) or promoted (the removal then refused: only the
// owner removes an admin), and both nodes' views agree.
func TestGroupConcurrentPromoteAndRemove(t *testing.T) {
	nodes, c, g := grGroup(t, "bob")
	alice, bob := c["alice"], c["bob"] // alice on node A, bob on node B
	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionPromote, UserID: "bob"}); err != nil {
		t.Fatal(err)
	}
	login(t, nodes[0], "carol")
	for round := range 5 {
		if _, err := grRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeAddMembers, ConversationID: g.ID, Members: []string{"carol"}}); err != nil {
			t.Fatalf("round %d: add carol: %v", round, err)
		}
		var promoted, removed error
		var wg sync.WaitGroup
		wg.Go(func() {
			promoted = grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionPromote, UserID: "carol"})
		})
		wg.Go(func() {
			_, removed = grRequest(t, bob, protocol.ClientFrame{Type: protocol.TypeRemoveMember, ConversationID: g.ID, UserID: "carol"})
		})
		wg.Wait()
		if (promoted == nil) == (removed == nil) {
			t.Fatalf("round %d: promote %v, remove %v; want exactly one to succeed", round, promoted, removed)
		}
		va, vb := grView(t, alice, g.ID), grView(t, bob, g.ID)
		in, admin := slices.Contains(va.Members, "carol"), slices.Contains(va.Group.Admins, "carol")
		if in != (promoted == nil) || admin != in || !slices.Equal(va.Members, vb.Members) || !slices.Equal(va.Group.Admins, vb.Group.Admins) {
			t.Fatalf("round %d: node A sees members %v admins %v, node B members %v admins %v (promote %v, remove %v)",
				round, va.Members, va.Group.Admins, vb.Members, vb.Group.Admins, promoted, removed)
		}
		if in { // back to the start: alice removes her
			if _, err := grRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeRemoveMember, ConversationID: g.ID, UserID: "carol"}); err != nil {
				t.Fatalf("round %d: alice removes admin carol: %v", round, err)
			}
		}
	}
}

// grInvite has c create an invite link of conv.
func grInvite(t *testing.T, c *client.Conn, conv string, seconds, maxUses int64) protocol.Invite {
	t.Helper()
	r, err := grRequest(t, c, protocol.ClientFrame{Type: protocol.TypeModerate, ConversationID: conv,
		Action: protocol.ActionCreateInvite, Seconds: seconds, MaxUses: maxUses})
	if err != nil || r.Type != protocol.TypeInvite || r.Invite == nil || !protocol.ValidInviteToken(r.Invite.Token) {
		t.Fatalf("create an invite link: %+v, %v", r, err)
	}
	return *r.Invite
}

// TestGroupInviteLinksAndReports: only admins make invite links; whoever holds one previews the
// group's name and member count and joins (from the other node), until it is used up or revoked;
// a banned user cannot join by link; a member's report of a message reaches the admins (and the
// operators' admin API), not the other members, until an admin dismisses it.
func TestGroupInviteLinksAndReports(t *testing.T) {
	nodes, c, g := grGroup(t, "bob")
	alice, bob := c["alice"], c["bob"] // alice on node A, bob on node B
	erin, frank, gina := connectReady(t, nodes[1], "erin"), connectReady(t, nodes[1], "frank"), connectReady(t, nodes[0], "gina")
	ctx := ctxT(t, time.Minute)

	_, err := grRequest(t, bob, protocol.ClientFrame{Type: protocol.TypeModerate, ConversationID: g.ID, Action: protocol.ActionCreateInvite})
	wantRefusal(t, "bob, a member, makes a link", err, protocol.CodeForbidden, "only the group's admins can create invite links")
	link := grInvite(t, alice, g.ID, 3600, 2)
	if link.MaxUses != 2 || link.ExpiresAt == nil || link.CreatedBy != "alice" {
		t.Errorf("the new link: %+v; want 2 uses, an expiry, made by alice", link)
	}
	grSystem(t, bob, g.ID, "alice created an invite link")
	preview, err := grRequest(t, erin, protocol.ClientFrame{Type: protocol.TypeInvitePreview, Token: link.Token})
	if err != nil || preview.Invite == nil || preview.Invite.Name != "group" || preview.Invite.Members != 2 || preview.Invite.ConversationID != g.ID {
		t.Fatalf("erin's preview: %+v, %v; want the group's name and 2 members", preview.Invite, err)
	}
	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionBan, UserID: "frank"}); err != nil {
		t.Fatalf("alice bans frank, not a member: %v", err)
	}
	_, err = grRequest(t, frank, protocol.ClientFrame{Type: protocol.TypeJoinInvite, Token: link.Token})
	wantRefusal(t, "banned frank joins by link", err, protocol.CodeForbidden, "you are banned from this group")

	joined, err := grRequest(t, erin, protocol.ClientFrame{Type: protocol.TypeJoinInvite, Token: link.Token})
	if err != nil || joined.Conversation == nil || joined.Conversation.ID != g.ID || !slices.Contains(joined.Conversation.Members, "erin") {
		t.Fatalf("erin joins by link: %+v, %v", joined.Conversation, err)
	}
	grSystem(t, alice, g.ID, "erin joined with an invite link")
	if _, err := erin.Send(ctx, g.ID, "hello, I am erin"); err != nil {
		t.Fatalf("erin sends after joining: %v", err)
	}
	if _, err := grRequest(t, frank, protocol.ClientFrame{Type: protocol.TypeJoinInvite, Token: link.Token}); err == nil {
		t.Fatal("frank joined while banned")
	}
	if _, err := grRequest(t, gina, protocol.ClientFrame{Type: protocol.TypeJoinInvite, Token: link.Token}); err != nil {
		t.Fatalf("gina joins with the link's second use: %v", err)
	}
	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionUnban, UserID: "frank"}); err != nil {
		t.Fatal(err)
	}
	_, err = grRequest(t, frank, protocol.ClientFrame{Type: protocol.TypeJoinInvite, Token: link.Token})
	wantRefusal(t, "a third use of a two-use link", err, protocol.CodeNotFound, "no such invite link: it may have been revoked")

	second := grInvite(t, alice, g.ID, 0, 0)
	list, err := grRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeListInvites, ConversationID: g.ID})
	if err != nil || list.Invites == nil || len(*list.Invites) != 1 || (*list.Invites)[0].Token != second.Token {
		t.Fatalf("alice's links: %+v, %v; want only the second (the first is used up)", list.Invites, err)
	}
	_, err = grRequest(t, bob, protocol.ClientFrame{Type: protocol.TypeListInvites, ConversationID: g.ID})
	wantRefusal(t, "bob lists the links", err, protocol.CodeForbidden, "only the group's admins can see its invite links")
	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionRevokeInvite, Token: second.Token}); err != nil {
		t.Fatalf("alice revokes the second link: %v", err)
	}
	_, err = grRequest(t, frank, protocol.ClientFrame{Type: protocol.TypeInvitePreview, Token: second.Token})
	wantRefusal(t, "a preview of a revoked link", err, protocol.CodeNotFound, "no such invite link: it may have been revoked")

	said, err := alice.Send(ctx, g.ID, "a message bob reports")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grRequest(t, bob, protocol.ClientFrame{Type: protocol.TypeReport, ConversationID: g.ID, Seq: said.Seq, Reason: "rude"}); err != nil {
		t.Fatalf("bob reports: %v", err)
	}
	pushed := testenv.Push(t, alice, 10*time.Second, func(f protocol.ServerFrame) bool {
		return f.Type == protocol.TypeReports && f.ConversationID == g.ID && f.ID == ""
	})
	if pushed.Reports == nil || len(*pushed.Reports) != 1 || (*pushed.Reports)[0].Reporter != "bob" {
		t.Errorf("alice's reports push: %+v; want bob's report", pushed.Reports)
	}
	_, err = grRequest(t, bob, protocol.ClientFrame{Type: protocol.TypeListReports, ConversationID: g.ID})
	wantRefusal(t, "bob lists reports", err, protocol.CodeForbidden, "only the group's admins can see its reports")
	reports, err := grRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeListReports, ConversationID: g.ID})
	if err != nil || reports.Reports == nil || len(*reports.Reports) != 1 {
		t.Fatalf("alice's reports: %+v, %v; want bob's", reports.Reports, err)
	}
	rep := (*reports.Reports)[0]
	if rep.Reporter != "bob" || rep.Seq != said.Seq || rep.Reason != "rude" {
		t.Errorf("the report: %+v; want bob's of message %d, rude", rep, said.Seq)
	}
	var operators struct{ Reports []protocol.Report }
	grAdminGet(t, nodes[1].AdminURL()+"/admin/conversations/"+g.ID+"/reports", &operators)
	if len(operators.Reports) != 1 || operators.Reports[0].ID != rep.ID {
		t.Errorf("the admin API's reports: %+v; want bob's", operators.Reports)
	}
	if err := grModerate(t, alice, g.ID, protocol.ClientFrame{Action: protocol.ActionDismissReport, ReportID: rep.ID}); err != nil {
		t.Fatalf("alice dismisses the report: %v", err)
	}
	if reports, err := grRequest(t, alice, protocol.ClientFrame{Type: protocol.TypeListReports, ConversationID: g.ID}); err != nil || len(*reports.Reports) != 0 {
		t.Errorf("alice's reports after dismissing: %+v, %v; want none", reports.Reports, err)
	}
	// The group was told nothing of the report: erin's next message after it is alice's next.
	barrier, err := alice.Send(ctx, g.ID, "after the report")
	if err != nil {
		t.Fatal(err)
	}
	if barrier.Seq != said.Seq+1 {
		t.Errorf("alice's message after the report has seq %d; want %d: the report or its dismissal was said in the group", barrier.Seq, said.Seq+1)
	}
}

// grAdminGet reads a JSON answer of the admin API into v.
func grAdminGet(t *testing.T, u string, v any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}
