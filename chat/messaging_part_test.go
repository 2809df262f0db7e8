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

// The messaging part alone: a small owner that numbers sends and keeps the messages, a store
// that reads them back, the blocking and read-state parts over their own small stores, a bus
// that records what is published, and a hub holding who is online here.

// owned is a Sender and a messageStore in one: it numbers each send of a conversation, gapless,
// and keeps what it stored, as the owner and the store together do.
type owned struct {
	mu    sync.Mutex
	convs map[string]storage.Conversation
	msgs  map[string][]storage.Message
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

func (o *owned) Conversation(_ context.Context, id string) (storage.Conversation, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.convs[id]
	if !ok {
		return storage.Conversation{}, storage.ErrNotFound
	}
	return c, nil
}

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
	o := &owned{convs: map[string]storage.Conversation{}, msgs: map[string][]storage.Message{}}
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
