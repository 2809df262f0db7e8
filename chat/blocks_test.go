package chat

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/chatd/chatd/protocol"
)

// sendErr sends one message and returns the error, for sends that should be refused.
func (ts *testService) sendErr(user, convID, body string) error {
	_, err := ts.svc.Send(ts.ctx, user, SendRequest{ConversationID: convID, ClientMsgID: uuid.NewString(), Body: body})
	return err
}

func (ts *testService) block(blocker, blocked string) {
	ts.t.Helper()
	if err := ts.svc.Block(ts.ctx, blocker, blocked); err != nil {
		ts.t.Fatalf("%s blocks %s: %v", blocker, blocked, err)
	}
}

func (ts *testService) unblock(blocker, blocked string) {
	ts.t.Helper()
	if err := ts.svc.Unblock(ts.ctx, blocker, blocked); err != nil {
		ts.t.Fatalf("%s unblocks %s: %v", blocker, blocked, err)
	}
}

func wantKind(t *testing.T, what string, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("%s: %v; want %v", what, err, kind)
	}
}

func TestBlockIsListedIdempotentAndUndone(t *testing.T) {
	ts := newTestService(t)
	wantKind(t, "block yourself", ts.svc.Block(ts.ctx, "alice", "alice"), protocol.ErrInvalid)
	wantKind(t, "block an unknown user", ts.svc.Block(ts.ctx, "alice", "ghost"), protocol.ErrNotFound)
	ts.block("alice", "carol")
	ts.block("alice", "bob")
	ts.block("alice", "bob") // twice is fine
	if got, err := ts.svc.Blocks(ts.ctx, "alice"); err != nil || !slices.Equal(got, []string{"bob", "carol"}) {
		t.Fatalf("alice's blocks: %v, %v; want [bob carol]", got, err)
	}
	if got, err := ts.svc.Blocks(ts.ctx, "bob"); err != nil || len(got) != 0 {
		t.Fatalf("bob's blocks: %v, %v; want none (being blocked is not listed)", got, err)
	}
	ts.unblock("alice", "bob")
	ts.unblock("alice", "bob") // undoing what is not there is fine
	if got, err := ts.svc.Blocks(ts.ctx, "alice"); err != nil || !slices.Equal(got, []string{"carol"}) {
		t.Fatalf("alice's blocks after unblocking bob: %v, %v; want [carol]", got, err)
	}
}

func TestBlockStopsOpeningTheDMEitherWay(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	bob := ts.connect("bob")
	ts.block("alice", "bob")
	_, err := ts.svc.OpenDM(ts.ctx, "bob", "alice")
	wantKind(t, "the blocked user opens the DM", err, protocol.ErrNotFound)
	_, err = ts.svc.OpenDM(ts.ctx, "alice", "bob")
	wantKind(t, "the blocker opens the DM", err, protocol.ErrForbidden)
	if n := ts.store.conversations(); n != 0 {
		t.Fatalf("%d conversations stored; want none", n)
	}
	if got := bob.ofType(t, protocol.TypeConversation); len(got) != 0 {
		t.Fatalf("bob was told of a conversation: %+v", got)
	}
	ts.unblock("alice", "bob")
	ts.dm("bob", "alice")
}

// TestBlockedUserHearsWhatAGoneAccountGets: whoever is blocked learns nothing from a refused open
// or add, whose answer is word for word the one for an account that does not exist; the blocker
// hears why.
func TestBlockedUserHearsWhatAGoneAccountGets(t *testing.T) {
	ts := newTestService(t)
	for _, u := range []string{"alice", "bob", "carol"} {
		ts.connect(u)
	}
	ts.block("alice", "bob")
	g := ts.group("bob", "carol")
	sameAsGone := func(what string, blockedErr, goneErr error) {
		t.Helper()
		wantKind(t, what, blockedErr, protocol.ErrNotFound)
		wantKind(t, what+" (no such account)", goneErr, protocol.ErrNotFound)
		if got, want := blockedErr.Error(), strings.ReplaceAll(goneErr.Error(), "ghost", "alice"); got != want {
			t.Fatalf("%s: the blocked user hears %q; an account that is gone gives %q", what, got, want)
		}
	}
	_, blockedErr := ts.svc.OpenDM(ts.ctx, "bob", "alice")
	_, goneErr := ts.svc.OpenDM(ts.ctx, "bob", "ghost")
	sameAsGone("open the DM", blockedErr, goneErr)
	_, blockedErr = ts.svc.CreateGroup(ts.ctx, "bob", "x", []string{"alice"})
	_, goneErr = ts.svc.CreateGroup(ts.ctx, "bob", "x", []string{"ghost"})
	sameAsGone("create a group", blockedErr, goneErr)
	sameAsGone("add to a group", ts.svc.AddMembers(ts.ctx, "bob", g, []string{"alice"}), ts.svc.AddMembers(ts.ctx, "bob", g, []string{"ghost"}))

	_, err := ts.svc.OpenDM(ts.ctx, "alice", "bob")
	wantKind(t, "the blocker opens the DM", err, protocol.ErrForbidden)
	if !strings.Contains(err.Error(), "you blocked bob") {
		t.Fatalf("the blocker hears %q; want it to say they blocked bob", err)
	}
}

func TestBlockStopsAddingToGroups(t *testing.T) {
	ts := newTestService(t)
	for _, u := range []string{"alice", "bob", "carol"} {
		ts.connect(u)
	}
	shared := ts.group("carol", "alice", "bob") // before the block
	ts.block("alice", "bob")

	_, err := ts.svc.CreateGroup(ts.ctx, "bob", "x", []string{"carol", "alice"})
	wantKind(t, "the blocked user creates a group with the blocker", err, protocol.ErrNotFound)
	_, err = ts.svc.CreateGroup(ts.ctx, "alice", "x", []string{"bob"})
	wantKind(t, "the blocker creates a group with the blocked user", err, protocol.ErrForbidden)
	if n := ts.store.conversations(); n != 1 {
		t.Fatalf("%d conversations stored; want only the group from before", n)
	}

	g := ts.group("bob", "carol")
	before := len(ts.store.messages(g))
	wantKind(t, "the blocked user adds the blocker", ts.svc.AddMembers(ts.ctx, "bob", g, []string{"dave", "alice"}), protocol.ErrNotFound)
	if c, _ := ts.store.conv(g); c.IsMember("alice") || c.IsMember("dave") || len(ts.store.messages(g)) != before {
		t.Fatalf("a refused add changed the group: members %v, %d messages (was %d)", c.Members, len(ts.store.messages(g)), before)
	}

	// A group both were in already is not affected.
	ts.send("bob", shared, "still here")
	ts.send("alice", shared, "me too")

	ts.unblock("alice", "bob")
	if err := ts.svc.AddMembers(ts.ctx, "bob", g, []string{"alice"}); err != nil {
		t.Fatalf("add after unblocking: %v", err)
	}
}

func TestBlockStopsSendsInTheDM(t *testing.T) {
	ts := newTestService(t)
	alice := ts.connect("alice")
	ts.connect("bob")
	dm := ts.dm("alice", "bob")
	ts.send("bob", dm, "hi")
	ts.block("alice", "bob")
	alice.forget()

	wantKind(t, "the blocked user sends", ts.sendErr("bob", dm, "are you there?"), protocol.ErrForbidden)
	wantKind(t, "the blocker sends", ts.sendErr("alice", dm, "go away"), protocol.ErrForbidden)
	if got := ts.store.messages(dm); len(got) != 1 {
		t.Fatalf("%d messages stored; want only the one from before the block", len(got))
	}
	if got := alice.seqs(t, dm); len(got) != 0 {
		t.Fatalf("alice got messages %v after blocking", got)
	}

	ts.unblock("alice", "bob")
	if m := ts.send("bob", dm, "sorry"); m.Seq != 2 {
		t.Fatalf("send after unblocking got seq %d; want 2", m.Seq)
	}
}

// TestDMSendReadsTheBlockOncePerChange proves the send path costs no store lookup per message: one
// lookup on the first send, one more after a block or unblock, none otherwise.
func TestDMSendReadsTheBlockOncePerChange(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	ts.connect("bob")
	dm := ts.dm("alice", "bob")
	start := ts.store.lookups()
	for range 5 {
		ts.send("bob", dm, "m")
	}
	if n := ts.store.lookups() - start; n != 1 {
		t.Fatalf("5 sends looked blocks up %d times; want 1", n)
	}
	ts.block("carol", "bob") // about another pair: the DM's state is kept
	for range 3 {
		ts.send("bob", dm, "m")
	}
	if n := ts.store.lookups() - start; n != 1 {
		t.Fatalf("a block of another pair made sends look up again: %d lookups; want 1", n)
	}
	ts.block("alice", "bob")
	for range 3 {
		wantKind(t, "send after the block", ts.sendErr("bob", dm, "m"), protocol.ErrForbidden)
	}
	if n := ts.store.lookups() - start; n != 2 {
		t.Fatalf("sends around one block looked up %d times; want 2", n)
	}
}

// TestBlockMadeOnAnotherNodeArrivesByEvent: the store changes behind this node's back (as when the
// blocker is on another node); the cached state holds until the blocks event arrives.
func TestBlockMadeOnAnotherNodeArrivesByEvent(t *testing.T) {
	ts := newTestService(t)
	ts.connect("bob")
	dm := ts.dm("bob", "alice")
	ts.send("bob", dm, "cached")
	if err := ts.store.Block(ts.ctx, "alice", "bob", now()); err != nil {
		t.Fatal(err)
	}
	ts.send("bob", dm, "before the event") // what a node that has not heard yet does
	ev, err := json.Marshal(userEvent{Type: userBlocks, Peer: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	ts.svc.HandleUserEvent("bob", ev)
	wantKind(t, "send after the event", ts.sendErr("bob", dm, "after"), protocol.ErrForbidden)

	// An unblock whose event was lost with a NATS blip is caught by the resync.
	if err := ts.store.Unblock(ts.ctx, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	wantKind(t, "send before the resync", ts.sendErr("bob", dm, "still cached"), protocol.ErrForbidden)
	ts.svc.Resync(ts.ctx)
	ts.send("bob", dm, "after the resync")
}

// TestBlockDuringTheLookupIsNotLost: a block made while a send's store lookup is answering must
// not be overwritten by the stale answer.
func TestBlockDuringTheLookupIsNotLost(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	ts.connect("bob")
	dm := ts.dm("alice", "bob")
	once := false
	ts.store.mu.Lock()
	ts.store.afterBlocked = func(a, b string) {
		if !once {
			once = true
			ts.block("alice", "bob")
		}
	}
	ts.store.mu.Unlock()
	ts.send("bob", dm, "raced with the block") // concurrent with it: may pass
	wantKind(t, "the next send", ts.sendErr("bob", dm, "after the block"), protocol.ErrForbidden)
}

// TestBlockAppliesHereAtOnce: on the node where the block is made, the next send is refused
// without waiting for the bus (the blocks event may still be on its way).
func TestBlockAppliesHereAtOnce(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	ts.connect("bob")
	dm := ts.dm("alice", "bob")
	ts.send("bob", dm, "cached as clear")
	ts.bus.hold()
	ts.block("alice", "bob")
	wantKind(t, "send while the event is held", ts.sendErr("bob", dm, "m"), protocol.ErrForbidden)
	ts.unblock("alice", "bob")
	ts.send("bob", dm, "unblocked while the event is held")
	ts.bus.release()
}
