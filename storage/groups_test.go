package storage_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv"
)

// TestUpdateGroup: an administrative change is read back as written (name, roles, settings,
// invite links, reports), and the member it adds or removes gets, or loses, the group in their
// memberships and their read cursor.
func TestUpdateGroup(t *testing.T) {
	cfg := testenv.StoreConfig(t)
	s := testenv.OpenStore(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ensure(t, ctx, s, "g", storage.KindGroup, "ann", "bea")
	until := time.Now().UTC().Add(time.Hour).Truncate(time.Millisecond)
	admin := storage.GroupAdmin{Owner: "ann", Admins: []string{"bea"}, Topic: "plans", Announcement: true, SlowModeSeconds: 30,
		Muted: map[string]time.Time{"bea": until}, Banned: []string{"eve"}, Pins: []int64{3, 1},
		Invites: []storage.Invite{{Token: "g_1", CreatedBy: "ann", CreatedAt: until, ExpiresAt: &until, MaxUses: 5, Uses: 1}},
		Reports: []storage.Report{{ID: "r1", Seq: 3, Reporter: "bea", Reason: "spam", CreatedAt: until}}}
	if err := s.UpdateGroup(ctx, "g", storage.GroupUpdate{Name: "Trip", Admin: admin, Add: []string{"cal"}}); err != nil {
		t.Fatal(err)
	}
	c, err := s.Conversation(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	got := c.Admin
	if c.Name != "Trip" || got == nil || got.Owner != "ann" || !slices.Equal(got.Admins, []string{"bea"}) || got.Topic != "plans" ||
		!got.Announcement || got.SlowModeSeconds != 30 || !got.Muted["bea"].Equal(until) || !slices.Equal(got.Banned, []string{"eve"}) ||
		!slices.Equal(got.Pins, []int64{3, 1}) || len(got.Invites) != 1 || got.Invites[0].Uses != 1 || len(got.Reports) != 1 {
		t.Fatalf("read back name %q, admin %+v; want what was written", c.Name, got)
	}
	if !slices.Equal(c.Members, []string{"ann", "bea", "cal"}) || !slices.Equal(conversationsOf(t, ctx, s, "cal"), []string{"g"}) ||
		!slices.Equal(cursorConversations(t, ctx, s, "cal"), []string{"g"}) {
		t.Fatalf("after adding cal: members %v", c.Members)
	}
	if err := s.UpdateGroup(ctx, "g", storage.GroupUpdate{Name: "Trip", Admin: storage.GroupAdmin{Owner: "ann"}, Remove: "bea"}); err != nil {
		t.Fatal(err)
	}
	if c, _ = s.Conversation(ctx, "g"); c.IsMember("bea") || len(c.Admin.Admins) != 0 || len(conversationsOf(t, ctx, s, "bea")) != 0 ||
		len(cursorConversations(t, ctx, s, "bea")) != 0 {
		t.Fatalf("after removing bea: members %v, admin %+v", c.Members, c.Admin)
	}
}
