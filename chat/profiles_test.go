package chat

import (
	"slices"
	"testing"

	"github.com/chatd/chatd/protocol"
)

// TestSetNameReachesOwnDevicesAndPeers: a rename is stored clean and pushed once to each of the
// user's devices and to their DM peer, not to a stranger; a bad name is refused; profiles answer
// in the order asked, once per id, leaving unknown ids out.
func TestSetNameReachesOwnDevicesAndPeers(t *testing.T) {
	ts := newTestService(t)
	phone, laptop := ts.connect("alice"), ts.connect("alice")
	bob, carol := ts.connect("bob"), ts.connect("carol")
	ts.dm("alice", "bob")

	if err := ts.svc.SetName(ts.ctx, "alice", "  Alice   Liddell "); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*fakeConn{"alice's phone": phone, "alice's laptop": laptop, "bob": bob} {
		got := c.ofType(t, protocol.TypeProfile)
		if len(got) != 1 || got[0].frame.UserID != "alice" || got[0].frame.Name != "Alice Liddell" {
			t.Errorf("%s got profile frames %+v; want one saying alice is Alice Liddell", name, got)
		}
	}
	if got := carol.ofType(t, protocol.TypeProfile); len(got) != 0 {
		t.Errorf("carol, who shares nothing with alice, got %+v", got)
	}
	wantKind(t, "a name with a direction override", ts.svc.SetName(ts.ctx, "alice", "\u202eecilA"), protocol.ErrInvalid)

	profiles, err := ts.svc.Profiles(ts.ctx, []string{"bob", "nobody", "alice", "bob"})
	if err != nil {
		t.Fatal(err)
	}
	want := []protocol.Profile{{UserID: "bob", Name: "bob"}, {UserID: "alice", Name: "Alice Liddell"}}
	if !slices.Equal(profiles, want) {
		t.Errorf("profiles: %+v; want %+v", profiles, want)
	}
}
