package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// The presence part alone: its own small store, a bus that records what it publishes, and a hub
// that holds who is online. None of the service's other parts is built.

// presenceRecords is a presenceStore that keeps presence records in memory and can fail.
type presenceRecords struct {
	mu       sync.Mutex
	nodes    map[string][]string // user -> nodes holding them
	lastSeen map[string]time.Time
	names    map[string]string
	writes   int   // RecordPresence calls
	failNext error // the next RecordPresence fails with it
}

func newPresenceRecords() *presenceRecords {
	return &presenceRecords{nodes: map[string][]string{}, lastSeen: map[string]time.Time{}, names: map[string]string{}}
}

func (r *presenceRecords) ConversationsOf(context.Context, string) ([]storage.Conversation, error) {
	return nil, nil
}

func (r *presenceRecords) RecordPresence(_ context.Context, node string, online, offline []string, _ time.Time) (map[string][]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes++
	if err := r.failNext; err != nil {
		r.failNext = nil
		return nil, err
	}
	out := map[string][]string{}
	for _, u := range online {
		if !slices.Contains(r.nodes[u], node) {
			r.nodes[u] = append(r.nodes[u], node)
		}
		out[u] = r.nodes[u]
	}
	for _, u := range offline {
		r.nodes[u] = slices.DeleteFunc(r.nodes[u], func(n string) bool { return n == node })
		out[u] = r.nodes[u]
	}
	return out, nil
}

func (r *presenceRecords) SetLastSeen(_ context.Context, userIDs []string, at time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range userIDs {
		r.lastSeen[u] = at
	}
	return nil
}

func (r *presenceRecords) PresenceOf(context.Context, []string) (map[string]storage.Presence, error) {
	return nil, nil
}
func (r *presenceRecords) SetHidePresence(context.Context, string, bool) error { return nil }

func (r *presenceRecords) SetName(_ context.Context, userID, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names[userID] = name
	return nil
}

func (r *presenceRecords) Profiles(context.Context, []string) ([]storage.User, error) {
	return nil, nil
}
func (r *presenceRecords) FindUsers(context.Context, string, string, int64) ([]storage.User, error) {
	return nil, nil
}

// onlineHere is what the records say of a user on node "n1".
func (r *presenceRecords) onlineHere(user string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.nodes[user], "n1")
}

// publishedBus is a Bus that records the user events published, as "to: type peer".
type publishedBus struct {
	mu     sync.Mutex
	events []string
}

func (b *publishedBus) PublishUser(userID string, data []byte) error {
	var ev userEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return err
	}
	what := ev.Type + " " + ev.Peer
	if ev.Type == userCursor {
		what = fmt.Sprintf("%s %s %d", ev.Type, ev.ConvID, ev.ReadSeq)
	}
	if ev.Type == userPresence {
		what += map[bool]string{true: " online", false: " last seen"}[ev.Online]
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, userID+": "+what)
	return nil
}

// PublishConversation records a conversation event as "conv: type user readSeq".
func (b *publishedBus) PublishConversation(convID string, data []byte) error {
	var ev conversationEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, fmt.Sprintf("%s: %s %s %d", convID, ev.Type, ev.UserID, ev.ReadSeq))
	return nil
}
func (b *publishedBus) WatchConversation(string)   {}
func (b *publishedBus) UnwatchConversation(string) {}
func (b *publishedBus) WatchUser(string)           {}
func (b *publishedBus) UnwatchUser(string)         {}

func (b *publishedBus) published() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.events)
}

// presencePart is the presence part of node "n1" alone, with its records and bus.
type presencePart struct {
	*presence
	records *presenceRecords
	bus     *publishedBus
}

func newPresencePart(t *testing.T) presencePart {
	t.Helper()
	records, bus := newPresenceRecords(), &publishedBus{}
	l := newLive(Config{NodeID: "n1", OpTimeout: 5 * time.Second, LiveReceiptsMaxMembers: DefaultLiveReceiptsMaxMembers}, bus, zerolog.Nop())
	p := newPresence(records, l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	return presencePart{presence: p, records: records, bus: bus}
}

// connect registers a loaded connection of user, whose presence their peers hear of, and queues
// its record, as the service's Open does.
func (p presencePart) connect(user string, peers ...string) (*fakeConn, *onlineUser) {
	loaded := make(chan struct{})
	close(loaded)
	u := &onlineUser{loaded: loaded, positions: map[string]*position{}, peers: map[string]struct{}{}}
	for _, peer := range peers {
		u.peers[peer] = struct{}{}
	}
	c := &fakeConn{user: user}
	u, first, _ := p.hub.Add(c, 0, u)
	if first {
		p.changed(user, u)
	}
	return c, u
}

// disconnect closes a connection and queues the record of the user's going, as Close does.
func (p presencePart) disconnect(c *fakeConn) {
	if u, last := p.hub.Remove(c); last {
		p.changed(c.UserID(), u)
	}
}

func (p presencePart) waitWritten(t *testing.T) {
	t.Helper()
	within(t, 10*time.Second, "writing the waiting presence records", func() { <-p.queue.awaitIdle() })
}

// TestPresencePartTellsPeers: a user's first connection is recorded online and told to their
// peers (and only them); their last one closing is recorded with a last-seen time, told the same
// way.
func TestPresencePartTellsPeers(t *testing.T) {
	p := newPresencePart(t)
	c, _ := p.connect("alice", "bob", "carol")
	p.waitWritten(t)
	if !p.records.onlineHere("alice") {
		t.Fatal("alice is not recorded online on n1")
	}
	want := []string{"bob: presence alice online", "carol: presence alice online"}
	if got := p.bus.published(); !slices.Equal(sortedCopy(got), want) {
		t.Fatalf("published %q; want %q", got, want)
	}
	p.disconnect(c)
	p.waitWritten(t)
	if p.records.onlineHere("alice") {
		t.Fatal("alice is still recorded online after her last connection closed")
	}
	if _, ok := p.records.lastSeen["alice"]; !ok {
		t.Fatal("no last-seen time for alice")
	}
	if got := p.bus.published()[2:]; !slices.Equal(sortedCopy(got), []string{"bob: presence alice last seen", "carol: presence alice last seen"}) {
		t.Fatalf("published after the close %q; want the last-seen events", got)
	}
}

// TestPresencePartTellsEachChangeOnce: two nodes that both saw a peer's last connection close
// each announce it; the user's devices get one presence push for the change, and the next
// changes as they come.
func TestPresencePartTellsEachChangeOnce(t *testing.T) {
	p := newPresencePart(t)
	c, _ := p.connect("bob", "alice")
	first, second := time.Now().UTC(), time.Now().UTC().Add(time.Millisecond)
	for _, ev := range []userEvent{
		{Type: userPresence, Peer: "alice", LastSeen: &first},  // from node 1
		{Type: userPresence, Peer: "alice", LastSeen: &second}, // from node 2, a moment later
		{Type: userPresence, Peer: "alice", Online: true},
		{Type: userPresence, Peer: "alice", LastSeen: &second},
	} {
		p.applyPresence("bob", ev)
	}
	var told []string
	for _, f := range c.ofType(t, protocol.TypePresence) {
		told = append(told, fmt.Sprintf("%s %v", f.frame.UserID, *f.frame.Online))
	}
	if want := []string{"alice false", "alice true", "alice false"}; !slices.Equal(told, want) {
		t.Fatalf("bob was pushed %q; want %q (each change once)", told, want)
	}
}

// TestPresencePartLateRecordFollowsTheHub: the record of a user's leaving that is queued only after
// they came back (a slow Close on another goroutine) leaves them recorded online: the writer reads
// the hub when it writes, not what the record said when it was queued.
func TestPresencePartLateRecordFollowsTheHub(t *testing.T) {
	p := newPresencePart(t)
	c, left := p.connect("alice", "bob")
	p.waitWritten(t)
	p.hub.Remove(c) // alice leaves; the record of it is late
	p.connect("alice", "bob")
	p.changed("alice", left) // now it comes
	p.waitWritten(t)
	if !p.records.onlineHere("alice") {
		t.Fatal("alice, connected, is recorded offline by the late record of her leaving")
	}
}

// TestPresencePartRetriesAFailedBatch: a batch the store fails is written again later, and
// nothing is told before it is written.
func TestPresencePartRetriesAFailedBatch(t *testing.T) {
	p := newPresencePart(t)
	p.records.mu.Lock()
	p.records.failNext = errors.New("store down")
	p.records.mu.Unlock()
	p.connect("alice", "bob")
	p.waitWritten(t)
	if !p.records.onlineHere("alice") {
		t.Fatal("alice's record was not written again after the failure")
	}
	if p.records.writes < 2 {
		t.Fatalf("%d writes; want the failed one and its retry", p.records.writes)
	}
	if got := p.bus.published(); !slices.Equal(got, []string{"bob: presence alice online"}) {
		t.Fatalf("published %q; want one online event, after the retry", got)
	}
}

// TestPresencePartNames: a new display name is checked, stored and told to the user's own devices
// and peers; a refused one changes nothing and is invalid.
func TestPresencePartNames(t *testing.T) {
	p := newPresencePart(t)
	p.connect("alice", "bob")
	p.waitWritten(t)
	before := len(p.bus.published())
	if err := p.SetName(t.Context(), "alice", "  Alice   Liddell "); err != nil {
		t.Fatal(err)
	}
	if got := p.records.names["alice"]; got != "Alice Liddell" {
		t.Fatalf("stored name %q; want it cleaned to Alice Liddell", got)
	}
	if got := p.bus.published()[before:]; !slices.Equal(sortedCopy(got), []string{"alice: profile alice", "bob: profile alice"}) {
		t.Fatalf("published %q; want the profile event to alice's devices and to bob", got)
	}
	err := p.SetName(t.Context(), "alice", strings.Repeat("x", 200))
	if !errors.Is(err, protocol.ErrInvalid) || p.records.names["alice"] != "Alice Liddell" {
		t.Fatalf("a name too long: %v, stored %q; want invalid and the old name kept", err, p.records.names["alice"])
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
