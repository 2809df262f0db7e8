package chat

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// The blocking part alone: its own small store, a bus that records what it publishes, and a hub
// that holds the online users whose DM positions cache a block's state.

// blockRecords is a blockStore in memory that counts the block lookups asked of it.
type blockRecords struct {
	mu      sync.Mutex
	users   map[string]bool
	blocks  map[[2]string]bool // blocker, blocked
	lookups int
}

func newBlockRecords(users ...string) *blockRecords {
	r := &blockRecords{users: map[string]bool{}, blocks: map[[2]string]bool{}}
	for _, u := range users {
		r.users[u] = true
	}
	return r
}

func (r *blockRecords) User(_ context.Context, id string) (storage.User, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.users[id] {
		return storage.User{}, storage.ErrNotFound
	}
	return storage.User{ID: id}, nil
}

func (r *blockRecords) Block(_ context.Context, blocker, blocked string, _ time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blocks[[2]string{blocker, blocked}] = true
	return nil
}

func (r *blockRecords) Unblock(_ context.Context, blocker, blocked string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.blocks, [2]string{blocker, blocked})
	return nil
}

func (r *blockRecords) BlocksOf(_ context.Context, blocker string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for b := range r.blocks {
		if b[0] == blocker {
			out = append(out, b[1])
		}
	}
	slices.Sort(out)
	return out, nil
}

func (r *blockRecords) Blocked(_ context.Context, a, b string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	return r.blocks[[2]string{a, b}] || r.blocks[[2]string{b, a}], nil
}

func (r *blockRecords) BlockedWith(_ context.Context, userID string, others []string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	var out []string
	for _, o := range others {
		if r.blocks[[2]string{userID, o}] || r.blocks[[2]string{o, userID}] {
			out = append(out, o)
		}
	}
	return out, nil
}

func (r *blockRecords) lookupsSoFar() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups
}

func newBlockingPart(users ...string) (*blocking, *blockRecords, *publishedBus) {
	records, bus := newBlockRecords(users...), &publishedBus{}
	l := newLive(Config{}, bus, zerolog.Nop())
	return &blocking{live: l, store: records}, records, bus
}

// onlineWithDM registers a connection of user with their DM with peer, as a load does.
func onlineWithDM(b *blocking, user, peer string) string {
	dm := DMID(user, peer)
	u := &onlineUser{positions: map[string]*position{dm: {kind: storage.KindDM, peer: peer}}}
	b.hub.Add(&fakeConn{user: user}, 0, u)
	return dm
}

// TestBlockingPartAnswers: the blocked user's refused open and add get word for word what an
// unknown account gets; the blocker is told why; blocking yourself or nobody is refused, blocking
// twice is fine, and the list holds whom one blocks.
func TestBlockingPartAnswers(t *testing.T) {
	b, _, _ := newBlockingPart("alice", "bob", "carol")
	ctx := t.Context()
	if err := b.Block(ctx, "alice", "alice"); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("block yourself: %v; want invalid", err)
	}
	if err := b.Block(ctx, "alice", "ghost"); !errors.Is(err, protocol.ErrNotFound) {
		t.Fatalf("block nobody: %v; want not found", err)
	}
	for range 2 {
		if err := b.Block(ctx, "alice", "bob"); err != nil {
			t.Fatalf("block: %v", err)
		}
	}
	if got, err := b.Blocks(ctx, "alice"); err != nil || !slices.Equal(got, []string{"bob"}) {
		t.Fatalf("alice's blocks %v, %v; want [bob]", got, err)
	}

	blocked, gone := b.checkDMOpen(ctx, "bob", "alice"), protocol.Refuse(protocol.ErrNotFound, noSuchUser, "alice")
	if !errors.Is(blocked, protocol.ErrNotFound) || blocked.Error() != gone.Error() {
		t.Fatalf("bob opens the DM: %v; want what a gone account gets: %v", blocked, gone)
	}
	if err := b.checkAdd(ctx, "bob", []string{"carol", "alice"}); !errors.Is(err, protocol.ErrNotFound) || err.Error() != gone.Error() {
		t.Fatalf("bob adds alice: %v; want %v", err, gone)
	}
	if err := b.checkDMOpen(ctx, "alice", "bob"); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("alice opens the DM: %v; want forbidden, and why", err)
	}
	if err := b.checkAdd(ctx, "carol", []string{"alice", "bob"}); err != nil {
		t.Fatalf("carol puts both in a group: %v; a third member may", err)
	}
}

// TestBlockingPartSendCache: a DM's sends ask the store once, then the cached state; a block made
// here binds the very next send and is published to both users' other nodes; an unblock frees it.
func TestBlockingPartSendCache(t *testing.T) {
	b, records, bus := newBlockingPart("alice", "bob")
	ctx := t.Context()
	dm := onlineWithDM(b, "bob", "alice")
	for range 3 {
		if err := b.checkDMSend(ctx, "bob", dm); err != nil {
			t.Fatalf("send with no block: %v", err)
		}
	}
	if n := records.lookupsSoFar(); n != 1 {
		t.Fatalf("%d block lookups for three sends; want 1, then the cache", n)
	}
	if err := b.Block(ctx, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	if err := b.checkDMSend(ctx, "bob", dm); !errors.Is(err, protocol.ErrForbidden) {
		t.Fatalf("the next send after the block: %v; want forbidden", err)
	}
	if got := sortedCopy(bus.published()); !slices.Equal(got, []string{"alice: blocks bob", "bob: blocks alice"}) {
		t.Fatalf("published %q; want a blocks event on each user's subject", got)
	}
	if err := b.Unblock(ctx, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	if err := b.checkDMSend(ctx, "bob", dm); err != nil {
		t.Fatalf("send after the unblock: %v", err)
	}
	if err := b.checkDMSend(ctx, "carol", dm); !errors.Is(err, protocol.ErrNotMember) {
		t.Fatalf("a send of someone not online here with the DM: %v; want not a member", err)
	}
}
