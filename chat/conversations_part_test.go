package chat

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
)

// The membership part alone: a small store of users and conversations, an owner that records the
// announcements it is asked to sequence, the blocking part over its own small store, a bus that
// records what is published, and a hub holding who is online here.

// memberRecords is a memberStore in memory.
type memberRecords struct {
	mu    sync.Mutex
	users map[string]bool
	convs map[string]storage.Conversation
}

func (r *memberRecords) Conversation(_ context.Context, id string) (storage.Conversation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.convs[id]
	if !ok {
		return storage.Conversation{}, storage.ErrNotFound
	}
	c.Members = slices.Clone(c.Members)
	return c, nil
}

func (r *memberRecords) EnsureConversation(_ context.Context, c storage.Conversation) (storage.Conversation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.convs[c.ID]; ok {
		return old, nil
	}
	r.convs[c.ID] = c
	return c, nil
}

func (r *memberRecords) MissingUsers(_ context.Context, ids []string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, id := range ids {
		if !r.users[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

func (r *memberRecords) AddMembers(_ context.Context, id string, userIDs []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.convs[id]
	c.Members = append(c.Members, userIDs...)
	r.convs[id] = c
	return nil
}

func (r *memberRecords) RemoveMember(_ context.Context, id, userID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.convs[id]
	c.Members = slices.DeleteFunc(slices.Clone(c.Members), func(m string) bool { return m == userID })
	r.convs[id] = c
	return nil
}

func (r *memberRecords) DeleteAccount(context.Context, string) (storage.DeletedAccount, error) {
	return storage.DeletedAccount{}, nil
}

func (r *memberRecords) ConversationsOf(_ context.Context, userID string) ([]storage.Conversation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []storage.Conversation
	for _, c := range r.convs {
		if c.IsMember(userID) {
			out = append(out, c)
		}
	}
	return out, nil
}

// announcements is a Sender that records the system messages it is asked to sequence.
type announcements struct {
	mu   sync.Mutex
	said []string
}

func (a *announcements) Send(_ context.Context, req sequencer.SendRequest) (protocol.Message, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if req.Kind != protocol.KindSystem || !req.Reload {
		return protocol.Message{}, errors.New("only reloading system messages are expected here")
	}
	a.said = append(a.said, req.Body)
	return protocol.Message{ConversationID: req.ConversationID, Seq: int64(len(a.said)), Kind: req.Kind, Body: req.Body}, nil
}

func (a *announcements) Reload(context.Context, string) error { return nil }

func (a *announcements) EraseSender(context.Context, string, string) ([]int64, error) {
	return nil, nil
}

func (a *announcements) all() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.said)
}

type membershipPart struct {
	*membership
	records *memberRecords
	blocks  *blockRecords
	said    *announcements
	bus     *publishedBus
}

func newMembershipPart(users ...string) membershipPart {
	records := &memberRecords{users: map[string]bool{}, convs: map[string]storage.Conversation{}}
	for _, u := range users {
		records.users[u] = true
	}
	blocks, said, bus := newBlockRecords(users...), &announcements{}, &publishedBus{}
	l := newLive(Config{LiveReceiptsMaxMembers: 32}, bus, zerolog.Nop())
	m := &membership{live: l, store: records, seq: said, blocks: &blocking{live: l, store: blocks}}
	return membershipPart{membership: m, records: records, blocks: blocks, said: said, bus: bus}
}

// online registers a connection of user with nothing routed yet, as a load of a new user does.
func (p membershipPart) online(user string) *fakeConn {
	loaded := make(chan struct{})
	close(loaded)
	c := &fakeConn{user: user}
	p.hub.Add(c, 0, &onlineUser{loaded: loaded, positions: map[string]*position{}})
	return c
}

// TestMembershipPartGroup: a group's creator has it at once, every member is told; adding and
// removing are announced through the owner and told to whom they concern; a member who is not
// its creator cannot remove others, anyone may leave; a DM's members cannot change; unknown users
// are not found.
func TestMembershipPartGroup(t *testing.T) {
	p := newMembershipPart("alice", "bob", "carol")
	ctx := t.Context()
	alice := p.online("alice")
	g, err := p.CreateGroup(ctx, "alice", "Team", []string{"bob"})
	if err != nil {
		t.Fatal(err)
	}
	if got := alice.ofType(t, protocol.TypeConversation); len(got) != 1 || got[0].frame.Conversation.ID != g.ID {
		t.Fatalf("alice's devices got %+v; want the new group at once", got)
	}
	if got := sortedCopy(p.bus.published()); !slices.Equal(got, []string{"alice: joined ", "bob: joined "}) {
		t.Fatalf("published %q; want a joined event to each member", got)
	}
	if err := p.AddMembers(ctx, "alice", g.ID, []string{"carol", "bob"}); err != nil {
		t.Fatal(err)
	}
	if err := p.AddMembers(ctx, "alice", g.ID, []string{"ghost"}); !errors.Is(err, protocol.ErrNotFound) {
		t.Fatalf("add an unknown user: %v; want not found", err)
	}
	if err := p.RemoveMember(ctx, "alice", g.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveMember(ctx, "alice", g.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if got := p.said.all(); !slices.Equal(got, []string{"alice added carol", "alice removed bob", "alice left"}) {
		t.Fatalf("announced %q", got)
	}
	if c, _ := p.records.Conversation(ctx, g.ID); !slices.Equal(c.Members, []string{"carol"}) {
		t.Fatalf("members left %v; want [carol]", c.Members)
	}
	if err := p.AddMembers(ctx, "alice", g.ID, []string{"bob"}); !errors.Is(err, protocol.ErrNotMember) {
		t.Fatalf("alice adds after leaving: %v; want not a member", err)
	}

	p.online("bob")
	h, err := p.CreateGroup(ctx, "bob", "Two", []string{"carol"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveMember(ctx, "bob", h.ID, "carol"); err != nil {
		t.Fatalf("the creator removes: %v", err)
	}
	p.online("alice")
	k, err := p.CreateGroup(ctx, "alice", "Three", []string{"bob", "carol"})
	if err != nil {
		t.Fatal(err)
	}
	p.applyJoin("bob", k, nil) // as the joined event does on bob's node
	if err := p.RemoveMember(ctx, "bob", k.ID, "carol"); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("a member who did not create the group removes another: %v; want forbidden", err)
	}
	if err := p.RemoveMember(ctx, "bob", k.ID, "bob"); err != nil {
		t.Fatalf("a member leaves: %v", err)
	}
	if got := p.said.all(); got[len(got)-1] != "bob left" {
		t.Fatalf("announced %q last; want bob left", got[len(got)-1])
	}
	dm, err := p.OpenDM(ctx, "bob", "carol")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AddMembers(ctx, "bob", dm.ID, []string{"alice"}); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("add to a DM: %v; want forbidden", err)
	}
	if _, err := p.OpenDM(ctx, "bob", "bob"); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("a DM with yourself: %v; want invalid", err)
	}
}

// TestMembershipPartBlocks: a block keeps its two users apart in new conversations, and the one
// blocked hears what an unknown account gets; nothing is stored.
func TestMembershipPartBlocks(t *testing.T) {
	p := newMembershipPart("alice", "bob")
	ctx := t.Context()
	p.online("alice")
	if err := p.blocks.Block(ctx, "bob", "alice", now()); err != nil {
		t.Fatal(err)
	}
	_, err := p.CreateGroup(ctx, "alice", "x", []string{"bob"})
	if gone := protocol.Refuse(protocol.ErrNotFound, noSuchUser, "bob"); !errors.Is(err, protocol.ErrNotFound) || err.Error() != gone.Error() {
		t.Fatalf("alice, blocked by bob, makes a group with him: %v; want no such user: bob", err)
	}
	if _, err := p.OpenDM(ctx, "alice", "bob"); !errors.Is(err, protocol.ErrNotFound) {
		t.Fatalf("alice opens a DM with bob: %v; want not found", err)
	}
	if n := len(p.records.convs); n != 0 {
		t.Fatalf("%d conversations stored; want none", n)
	}
}

// The messaging part alone: a small owner that numbers sends and keeps the messages, a store
// that reads them back, the blocking and read-state parts over their own small stores, a bus
// that records what is published, and a hub holding who is online here.

// owned is a Sender and a messageStore in one: it numbers each send of a conversation, gapless,
// and keeps what it stored, as the owner and the store together do.
type owned struct {
	*memberRecords // the conversations
	msgs           map[string][]storage.Message
}

func (o *owned) Send(_ context.Context, req sequencer.SendRequest) (protocol.Message, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.convs[req.ConversationID]
	if !ok || !c.IsMember(req.SenderID) {
		return protocol.Message{}, protocol.ErrNotMember
	}
	c.LastSeq++
	o.convs[c.ID] = c
	m := storage.Message{ConversationID: c.ID, Seq: c.LastSeq, SenderID: req.SenderID, Kind: req.Kind, Body: req.Body, ClientMsgID: req.ClientMsgID}
	o.msgs[c.ID] = append(o.msgs[c.ID], m)
	return protocol.Message{ConversationID: c.ID, Seq: m.Seq, SenderID: m.SenderID, Kind: m.Kind, Body: m.Body}, nil
}

func (o *owned) Reload(context.Context, string) error { return nil }

func (o *owned) EraseSender(context.Context, string, string) ([]int64, error) { return nil, nil }

func (o *owned) ConversationsOf(context.Context, string) ([]storage.Conversation, error) {
	return nil, nil
}

func (o *owned) MessageRange(_ context.Context, id string, from, to int64) ([]storage.Message, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []storage.Message
	for _, m := range o.msgs[id] {
		if m.Seq >= from && m.Seq <= to {
			out = append(out, m)
		}
	}
	return out, nil
}

func (o *owned) ChangedMessages(context.Context, string, int64, int64, int) ([]storage.Message, error) {
	return nil, nil
}
func (o *owned) HideConversation(context.Context, string, string, int64) error { return nil }

// TestMessagingPartSendAndPage: sends get gapless seqs from the owner, a non-member's send is
// refused, a blocked DM's send is refused before the owner is asked, and history pages are
// bounded ranges by seq.
func TestMessagingPartSendAndPage(t *testing.T) {
	o := &owned{memberRecords: &memberRecords{convs: map[string]storage.Conversation{}}, msgs: map[string][]storage.Message{}}
	dm := DMID("alice", "bob")
	o.convs["g"] = storage.Conversation{ID: "g", Kind: storage.KindGroup, Members: []string{"alice", "bob"}}
	o.convs[dm] = storage.Conversation{ID: dm, Kind: storage.KindDM, Members: []string{"alice", "bob"}}
	l := newLive(Config{LiveReceiptsMaxMembers: 32, OpTimeout: DefaultOpTimeout, MaxConcurrentSyncReads: 1}, &publishedBus{}, zerolog.Nop())
	blockStore := newBlockRecords("alice", "bob")
	blocks := &blocking{live: l, store: blockStore}
	m := newMessaging(o, o, blocks, &readState{live: l, store: &readRecords{}, reads: &waitingReads{}}, l)
	l.hub.Add(&fakeConn{user: "alice"}, 0, &onlineUser{positions: map[string]*position{
		"g": {kind: storage.KindGroup, members: 2}, dm: {kind: storage.KindDM, members: 2, peer: "bob"}}})
	ctx := t.Context()

	for i, body := range []string{"one", "two", "three", "four"} {
		got, err := m.Send(ctx, "alice", SendRequest{ConversationID: "g", ClientMsgID: body, Body: body})
		if err != nil || got.Seq != int64(i+1) {
			t.Fatalf("send %q: seq %d, %v; want seq %d", body, got.Seq, err, i+1)
		}
	}
	if _, err := m.Send(ctx, "carol", SendRequest{ConversationID: "g", ClientMsgID: "x", Body: "x"}); !errors.Is(err, protocol.ErrNotMember) {
		t.Fatalf("a send of someone not in the group: %v; want not a member", err)
	}
	before := int64(2)
	page, err := m.History(ctx, "alice", "g", Anchor{Before: &before}, 2)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, msg := range page.Messages {
		seqs = append(seqs, msg.Seq)
	}
	if !slices.Equal(seqs, []int64{1}) || page.HasBefore || !page.HasAfter {
		t.Fatalf("the page before 2: seqs %v, before %v, after %v; want [1], nothing before, more after", seqs, page.HasBefore, page.HasAfter)
	}
	page, err = m.History(ctx, "alice", "g", Anchor{}, 2)
	seqs = seqs[:0]
	for _, msg := range page.Messages {
		seqs = append(seqs, msg.Seq)
	}
	if err != nil || !slices.Equal(seqs, []int64{3, 4}) || !page.HasBefore {
		t.Fatalf("the latest page: seqs %v, before %v, %v; want [3 4] with more before", seqs, page.HasBefore, err)
	}

	if err := blockStore.Block(ctx, "bob", "alice", now()); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Send(ctx, "alice", SendRequest{ConversationID: dm, ClientMsgID: "y", Body: "y"}); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("a send in a DM with a block: %v; want forbidden", err)
	}
	if n := len(o.msgs[dm]); n != 0 {
		t.Fatalf("%d messages stored in the blocked DM; want none", n)
	}
}
