package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/testenv"
)

// TestRunningAGroup: the group commands as people use them: a member's add is refused with the
// reason on stderr; the owner promotes; the admin adds, pins and makes a one-use invite link; a
// newcomer previews and joins by it; a member reports a message and the admin lists it; info
// prints the roles and settings.
func TestRunningAGroup(t *testing.T) {
	env := testenv.NewEnv(t)
	n := testenv.StartNode(t, env.NodeConfig())
	alice, bob, carol, dave := newUser(t, n.URL()), newUser(t, n.URL()), newUser(t, n.URL()), newUser(t, n.URL())
	for name, u := range map[string]*user{"alice": alice, "bob": bob, "carol": carol, "dave": dave} {
		u.must("login", name)
	}
	g := alice.must("group", "Team", "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, errOut, code := bob.run(ctx, "", "add", g, "carol"); code != exitFailure || !strings.Contains(errOut, "only the group's admins can add members") {
		t.Fatalf("bob adds as a member: exit %d, stderr %q; want 1 and the reason", code, errOut)
	}
	alice.must("moderate", g, "promote", "bob")
	bob.must("add", g, "carol")
	seq := alice.must("send", g, "welcome")
	bob.must("moderate", g, "pin", seq)
	bob.must("moderate", g, "slowmode", "30")
	if _, _, code := bob.run(ctx, "", "moderate", g, "announcement", "maybe"); code != exitUsage {
		t.Fatalf("announcement maybe: exit %d; want %d", code, exitUsage)
	}
	token := bob.must("invite", g, "-uses", "1", "-expires", "1h")
	if !protocol.ValidInviteToken(token) {
		t.Fatalf("invite printed %q; want a token", token)
	}
	if got := dave.must("join", "-preview", token); got != "Team\t3 members" {
		t.Fatalf("preview: %q", got)
	}
	if got := dave.must("join", token); got != g {
		t.Fatalf("join printed %q; want %s", got, g)
	}
	carol.must("report", g, seq, "not", "welcome")
	reports := bob.must("reports", g)
	if !strings.Contains(reports, "message "+seq+"\tby carol\tnot welcome") {
		t.Fatalf("bob's reports: %q", reports)
	}
	info := carol.must("info", g)
	for _, want := range []string{"alice\towner", "bob\tadmin", "carol\tmember", "dave\tmember", "slow mode: 30 s", "pins: [" + seq + "]"} {
		if !strings.Contains(info, want) {
			t.Errorf("info lacks %q:\n%s", want, info)
		}
	}
	if _, errOut, code := alice.run(ctx, "", "leave", g); code != exitFailure || !strings.Contains(errOut, "hand the group over") {
		t.Fatalf("the owner leaves: exit %d, stderr %q", code, errOut)
	}
}
