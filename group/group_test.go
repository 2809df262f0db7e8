package group

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// team is a group alice owns, with bob an admin and carol and dave plain members, 10 messages.
func team() storage.Conversation {
	return storage.Conversation{ID: "g", Kind: storage.KindGroup, Name: "Team", CreatedBy: "alice",
		Members: []string{"alice", "bob", "carol", "dave"}, LastSeq: 10,
		Admin: &storage.GroupAdmin{Owner: "alice", Admins: []string{"bob"}}}
}

// TestWhoMayDoWhat runs every change as each role: refused ones with their code and reason.
func TestWhoMayDoWhat(t *testing.T) {
	user := func(u string) []string { return []string{u} }
	cases := []struct {
		name  string
		actor string
		op    Op
		code  string // "" when allowed
		body  string // the system message, or the refusal's reason
	}{
		{"a member adds", "carol", Op{Action: OpAdd, Users: user("erin")}, protocol.CodeForbidden, "only the group's admins can add members"},
		{"an admin adds", "bob", Op{Action: OpAdd, Users: []string{"erin", "carol", "erin"}}, "", "bob added erin"},
		{"a member removes", "carol", Op{Action: OpRemove, Users: user("dave")}, protocol.CodeForbidden, "only the group's admins can remove members"},
		{"an admin removes a member", "bob", Op{Action: OpRemove, Users: user("dave")}, "", "bob removed dave"},
		{"an admin removes an admin", "bob", Op{Action: protocol.ActionBan, Users: user("bob")}, protocol.CodeForbidden, "bob is an admin: only the group's owner can do that to an admin"},
		{"an admin removes the owner", "bob", Op{Action: OpRemove, Users: user("alice")}, protocol.CodeForbidden, "alice is the group's owner"},
		{"the owner removes an admin", "alice", Op{Action: OpRemove, Users: user("bob")}, "", "alice removed bob"},
		{"remove a non-member", "alice", Op{Action: OpRemove, Users: user("erin")}, protocol.CodeNotFound, "erin is not in this group"},
		{"a member leaves", "carol", Op{Action: OpRemove, Users: user("carol")}, "", "carol left"},
		{"the owner leaves", "alice", Op{Action: OpRemove, Users: user("alice")}, protocol.CodeForbidden, "hand the group over to another member before leaving: you are its owner"},
		{"a member renames", "carol", Op{Action: protocol.ActionRename, Text: "X"}, protocol.CodeForbidden, "only the group's admins can rename the group"},
		{"an admin renames", "bob", Op{Action: protocol.ActionRename, Text: "X"}, "", `bob renamed the group to "X"`},
		{"an admin sets the topic", "bob", Op{Action: protocol.ActionSetTopic, Text: "plans"}, "", `bob set the topic to "plans"`},
		{"an admin promotes", "bob", Op{Action: protocol.ActionPromote, Users: user("carol")}, protocol.CodeForbidden, "only the group's owner can appoint admins"},
		{"the owner promotes", "alice", Op{Action: protocol.ActionPromote, Users: user("carol")}, "", "alice made carol an admin"},
		{"the owner demotes", "alice", Op{Action: protocol.ActionDemote, Users: user("bob")}, "", "alice made bob a member"},
		{"the owner hands over", "alice", Op{Action: protocol.ActionTransfer, Users: user("carol")}, "", "alice handed the group over to carol"},
		{"a member pins", "carol", Op{Action: protocol.ActionPin, Seq: 3}, protocol.CodeForbidden, "only the group's admins can pin messages"},
		{"an admin pins", "bob", Op{Action: protocol.ActionPin, Seq: 3}, "", "bob pinned message 3"},
		{"pin a message not there", "bob", Op{Action: protocol.ActionPin, Seq: 11}, protocol.CodeNotFound, "no message 11 in this conversation"},
		{"an admin mutes", "bob", Op{Action: protocol.ActionMute, Users: user("carol"), Seconds: 60}, "", "bob muted carol for 60 seconds"},
		{"the owner mutes an admin", "alice", Op{Action: protocol.ActionMute, Users: user("bob"), Seconds: 60}, protocol.CodeForbidden, "bob is an admin, and admins are never muted: make them a member first"},
		{"an admin bans", "bob", Op{Action: protocol.ActionBan, Users: user("carol")}, "", "bob banned carol"},
		{"announcement on", "bob", Op{Action: protocol.ActionAnnouncement, Enabled: true}, "", "bob made this an announcement group: only admins post"},
		{"slow mode on", "bob", Op{Action: protocol.ActionSlowMode, Seconds: 30}, "", "bob turned slow mode on: one message every 30 seconds"},
		{"a member sets slow mode", "dave", Op{Action: protocol.ActionSlowMode, Seconds: 30}, protocol.CodeForbidden, "only the group's admins can change slow mode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Apply(Of(team()), tc.actor, tc.op, t0)
			if tc.code != "" {
				var pe *protocol.Error
				if !errors.As(err, &pe) || pe.Code != tc.code || pe.Message != tc.body {
					t.Fatalf("got %v; want %s: %s", err, tc.code, tc.body)
				}
				return
			}
			if err != nil || !r.Changed || r.Body != tc.body {
				t.Fatalf("got %+v, %v; want the change announced as %q", r, err, tc.body)
			}
		})
	}
}

// TestChangesAsStored: what a change writes, and that a repeat changes nothing.
func TestChangesAsStored(t *testing.T) {
	c := team()
	apply := func(actor string, op Op) Result {
		t.Helper()
		r, err := Apply(Of(c), actor, op, t0)
		if err != nil {
			t.Fatalf("%s %s: %v", actor, op.Action, err)
		}
		if r.Changed {
			c = Applied(c, r.Update)
		}
		return r
	}
	apply("alice", Op{Action: protocol.ActionTransfer, Users: []string{"carol"}})
	if a := c.Admin; a.Owner != "carol" || !slices.Equal(a.Admins, []string{"bob", "alice"}) {
		t.Fatalf("after the handover: %+v; want carol the owner, bob and alice admins", a)
	}
	if _, err := Apply(Of(c), "alice", Op{Action: protocol.ActionPromote, Users: []string{"dave"}}, t0); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("alice promotes after handing the group over: %v; want forbidden", err)
	}
	apply("carol", Op{Action: protocol.ActionBan, Users: []string{"dave"}})
	if slices.Contains(c.Members, "dave") || !slices.Equal(c.Admin.Banned, []string{"dave"}) {
		t.Fatalf("after the ban: members %v, banned %v", c.Members, c.Admin.Banned)
	}
	if _, err := Apply(Of(c), "bob", Op{Action: OpAdd, Users: []string{"dave"}}, t0); err == nil || err.Error() != "forbidden: dave is banned from this group" {
		t.Fatalf("adding a banned user: %v", err)
	}
	if r := apply("bob", Op{Action: protocol.ActionBan, Users: []string{"dave"}}); r.Changed {
		t.Fatal("a second ban changed something")
	}
	apply("bob", Op{Action: protocol.ActionUnban, Users: []string{"dave"}})
	apply("bob", Op{Action: OpAdd, Users: []string{"dave"}})
	if !slices.Contains(c.Members, "dave") {
		t.Fatal("dave was not added back after the unban")
	}
	for seq := int64(1); seq <= 10; seq++ {
		apply("bob", Op{Action: protocol.ActionPin, Seq: seq})
	}
	c.LastSeq = 100
	for seq := int64(11); seq <= protocol.MaxPins; seq++ {
		apply("bob", Op{Action: protocol.ActionPin, Seq: seq})
	}
	if _, err := Apply(Of(c), "bob", Op{Action: protocol.ActionPin, Seq: 99}, t0); !errors.Is(err, protocol.ErrLimit) {
		t.Fatalf("pin %d: %v; want limit_exceeded", protocol.MaxPins+1, err)
	}
	if _, err := Apply(Of(storage.Conversation{Kind: storage.KindDM, Members: []string{"a", "b"}}), "a", Op{Action: protocol.ActionRename, Text: "x"}, t0); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("rename a DM: %v; want forbidden", err)
	}
}

// TestCheckSend: announcement groups, mutes and slow mode refuse members and let admins post.
func TestCheckSend(t *testing.T) {
	c := team()
	c.Admin.SlowModeSeconds = 30
	c.Admin.Muted = map[string]time.Time{"dave": t0.Add(time.Minute)}
	g := Of(c)
	if err := CheckSend(g, "carol", time.Time{}, t0); err != nil {
		t.Fatalf("carol's first message in slow mode: %v", err)
	}
	err := CheckSend(g, "carol", t0.Add(-10*time.Second), t0)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeRateLimited || pe.RetryAfter != 20*time.Second {
		t.Fatalf("carol 10s after her last message: %v; want rate_limited, retry after 20s", err)
	}
	if err := CheckSend(g, "bob", t0.Add(-time.Second), t0); err != nil {
		t.Fatalf("an admin in slow mode: %v", err)
	}
	if err := CheckSend(g, "dave", time.Time{}, t0); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("muted dave: %v; want forbidden", err)
	}
	if err := CheckSend(g, "dave", time.Time{}, t0.Add(time.Minute)); err != nil {
		t.Fatalf("dave once his mute is over: %v", err)
	}
	c.Admin.Announcement = true
	if err := CheckSend(Of(c), "carol", time.Time{}, t0); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("a member in an announcement group: %v; want forbidden", err)
	}
	if err := CheckSend(Of(c), "alice", time.Time{}, t0); err != nil {
		t.Fatalf("the owner in an announcement group: %v", err)
	}
	if v := View(c, t0.Add(2*time.Minute)); v.Owner != "alice" || len(v.Muted) != 0 || !v.Announcement {
		t.Fatalf("view %+v; want alice the owner, no mute left, announcement on", v)
	}
}

// TestInvitesAndReports: a link joins until it is used up or expires, never a banned user; a
// member's report is kept for the admins with no system message, once per member and message.
func TestInvitesAndReports(t *testing.T) {
	c := team()
	apply := func(actor string, op Op, at time.Time) (Result, error) {
		r, err := Apply(Of(c), actor, op, at)
		if err == nil && r.Changed {
			c = Applied(c, r.Update)
		}
		return r, err
	}
	if _, err := apply("carol", Op{Action: protocol.ActionCreateInvite, ID: "g_1"}, t0); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("a member makes a link: %v; want forbidden", err)
	}
	if _, err := apply("bob", Op{Action: protocol.ActionCreateInvite, ID: "g_1", Seconds: 60, MaxUses: 1}, t0); err != nil {
		t.Fatal(err)
	}
	c.Admin.Banned = []string{"frank"}
	if _, err := apply("frank", Op{Action: OpJoin, ID: "g_1"}, t0); err == nil || err.Error() != "forbidden: you are banned from this group" {
		t.Fatalf("banned frank joins: %v", err)
	}
	if _, err := FindInvite(c, "g_1", t0.Add(time.Minute)); err == nil || err.Error() != "not_found: this invite link has expired" {
		t.Fatalf("the link a minute later: %v; want expired", err)
	}
	if r, err := apply("erin", Op{Action: OpJoin, ID: "g_1"}, t0); err != nil || r.Body != "erin joined with an invite link" || !slices.Contains(c.Members, "erin") {
		t.Fatalf("erin joins: %+v, %v", r, err)
	}
	if _, err := apply("gina", Op{Action: OpJoin, ID: "g_1"}, t0); !errors.Is(err, protocol.ErrNotFound) {
		t.Fatalf("a second use of a one-use link: %v; want not found", err)
	}
	r, err := apply("carol", Op{Action: OpReport, ID: "r1", Seq: 2, Text: "spam"}, t0)
	if err != nil || !r.Changed || r.Body != "" || len(c.Admin.Reports) != 1 {
		t.Fatalf("carol reports: %+v, %v, reports %+v; want one kept, nothing said", r, err, c.Admin.Reports)
	}
	if r, _ := apply("carol", Op{Action: OpReport, ID: "r2", Seq: 2, Text: "spam!"}, t0); r.Changed {
		t.Fatal("carol's second report of the same message was kept")
	}
	if _, err := apply("carol", Op{Action: protocol.ActionDismissReport, ID: "r1"}, t0); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("a member dismisses: %v; want forbidden", err)
	}
	if _, err := apply("bob", Op{Action: protocol.ActionDismissReport, ID: "r1"}, t0); err != nil || len(c.Admin.Reports) != 0 {
		t.Fatalf("bob dismisses: %v, reports left %+v", err, c.Admin.Reports)
	}
}

// TestOwnerGone: a group whose owner deleted their account is run by its first admin still in
// it, in the rules and in the view; with no admin left nobody owns it.
func TestOwnerGone(t *testing.T) {
	c := team()
	c.Members = []string{"bob", "carol", "dave"} // alice's account is gone
	c.Admin.Admins = []string{"erin", "bob"}     // erin left before
	if r, err := Apply(Of(c), "bob", Op{Action: protocol.ActionPromote, Users: []string{"carol"}}, t0); err != nil || r.Update.Admin.Owner != "bob" {
		t.Fatalf("bob promotes carol: %+v, %v; want bob the owner now", r.Update.Admin, err)
	}
	if v := View(c, t0); v.Owner != "bob" || len(v.Admins) != 0 {
		t.Fatalf("view %+v; want bob the owner, and erin, gone, no admin", v)
	}
	c.Admin.Admins = nil
	if _, err := Apply(Of(c), "carol", Op{Action: protocol.ActionRename, Text: "x"}, t0); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("a member renames an ownerless group: %v; want forbidden", err)
	}
}
