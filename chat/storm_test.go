package chat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/testenv/poll"
	"github.com/chatd/chatd/testenv/promtest"
)

// These tests are a reconnect storm in miniature: many sessions of one node catch up at once.
// The fake store's range reads are held at a gate, so the reads overlap as they do when a real
// store is slow, and the gate counts what reached the store.

// rangeGate holds the fake store's MessageRange calls that it matches until it is opened, and
// counts them: in all, by range, and the most held at once.
type rangeGate struct {
	match  func(from, to int64) bool
	opened chan struct{}
	once   sync.Once

	mu        sync.Mutex
	reads     map[messageRange]int
	total     int
	inside    int
	maxInside int
}

// gateRanges installs a gate on ts's store for the ranges match accepts (nil: all). The gate is
// opened when the test ends, so no read stays held.
func gateRanges(t *testing.T, ts *testService, match func(from, to int64) bool) *rangeGate {
	g := &rangeGate{match: match, opened: make(chan struct{}), reads: make(map[messageRange]int)}
	ts.store.mu.Lock()
	ts.store.beforeRange = g.hold
	ts.store.mu.Unlock()
	t.Cleanup(g.open)
	return g
}

func (g *rangeGate) hold(convID string, from, to int64) {
	if g.match != nil && !g.match(from, to) {
		return
	}
	g.mu.Lock()
	g.reads[messageRange{convID, from, to}]++
	g.total++
	g.inside++
	g.maxInside = max(g.maxInside, g.inside)
	g.mu.Unlock()
	<-g.opened
	g.mu.Lock()
	g.inside--
	g.mu.Unlock()
}

func (g *rangeGate) open() { g.once.Do(func() { close(g.opened) }) }

// counts returns the reads so far, those held now, and the most held at once.
func (g *rangeGate) counts() (total, inside, maxInside int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total, g.inside, g.maxInside
}

func (g *rangeGate) readsOf(r messageRange) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reads[r]
}

// waitingFor counts the callers waiting for a read of key.
func (g *sharedReads[K, V]) waitingFor(key K) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	kr := g.keys[key]
	if kr == nil {
		return 0
	}
	n := kr.running.waiting
	if kr.next != nil {
		n += kr.next.waiting
	}
	return n
}

// waitUntil polls cond until it holds, failing the test after ten seconds with what.
func waitUntil(t *testing.T, what func() string, cond func() bool) {
	t.Helper()
	poll.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if !cond() {
			return fmt.Errorf("waiting: %s", what())
		}
		return nil
	})
}

// stormGroup makes a group of alice and n more users, with msgs messages in it, and opens (without
// syncing) one connection for each of the n members, as their reconnecting clients do.
func stormGroup(t *testing.T, ts *testService, n, msgs int) (string, []*fakeConn) {
	t.Helper()
	var members []string
	for i := range n {
		id := fmt.Sprintf("member%02d", i)
		ts.store.addUser(id)
		members = append(members, id)
	}
	ts.connect("alice")
	g := ts.group("alice", members...)
	for i := 1; i <= msgs; i++ {
		ts.send("alice", g, fmt.Sprint(i))
	}
	conns := make([]*fakeConn, n)
	for i, m := range members {
		conns[i] = ts.open(m)
	}
	return g, conns
}

// seqsUpTo is 1..n.
func seqsUpTo(n int64) []int64 {
	var out []int64
	for s := int64(1); s <= n; s++ {
		out = append(out, s)
	}
	return out
}

// TestIdenticalSyncsShareStoreReads: fifty members of one group reconnect at once and sync from
// the same seq: the store serves their replay with at most two reads (the first sync's, and one
// for all who asked while it ran), and each member gets the whole replay.
func TestIdenticalSyncsShareStoreReads(t *testing.T) {
	ts := newTestService(t)
	g, conns := stormGroup(t, ts, 50, 5)
	gate := gateRanges(t, ts, nil)

	errs, key := syncAllWaiting(t, ts, g, conns)
	gate.open()
	for range conns {
		if err := <-errs; err != nil {
			t.Fatalf("sync: %v", err)
		}
	}

	if reads := gate.readsOf(key); reads < 1 || reads > 2 {
		t.Errorf("%d identical syncs cost %d store reads, want 1 or 2", len(conns), reads)
	}
	for _, c := range conns {
		if got := c.seqs(t, g); !slices.Equal(got, seqsUpTo(5)) {
			t.Fatalf("%s replayed seqs %v, want 1..5", c.user, got)
		}
	}
}

// TestIdenticalPagesShareStoreReads: fifty members open the same conversation at once and ask for
// its latest page: at most two store reads, and every page is whole.
func TestIdenticalPagesShareStoreReads(t *testing.T) {
	ts := newTestService(t)
	g, conns := stormGroup(t, ts, 50, 5)
	gate := gateRanges(t, ts, nil)

	type result struct {
		page Page
		err  error
	}
	results := make(chan result, len(conns))
	for _, c := range conns {
		go func() {
			p, err := ts.svc.History(ts.ctx, c.user, g, Anchor{}, 10)
			results <- result{p, err}
		}()
	}
	key := messageRange{g, 1, 5}
	waitUntil(t, func() string {
		return fmt.Sprintf("%d of %d pages waiting for a read", ts.svc.pageRanges.waitingFor(key), len(conns))
	}, func() bool { return ts.svc.pageRanges.waitingFor(key) == len(conns) })
	gate.open()
	for range conns {
		r := <-results
		if r.err != nil {
			t.Fatalf("history: %v", r.err)
		}
		var got []int64
		for _, m := range r.page.Messages {
			got = append(got, m.Seq)
		}
		if !slices.Equal(got, seqsUpTo(5)) || r.page.LastSeq != 5 {
			t.Fatalf("page holds seqs %v (last %d), want 1..5", got, r.page.LastSeq)
		}
	}
	if reads := gate.readsOf(key); reads < 1 || reads > 2 {
		t.Errorf("%d identical pages cost %d store reads, want 1 or 2", len(conns), reads)
	}
}

// TestDifferentRangesAreNotMerged: syncs from different seqs and pages of different sizes, all at
// once, each read the store for their own range and get exactly it.
func TestDifferentRangesAreNotMerged(t *testing.T) {
	ts := newTestService(t)
	g, conns := stormGroup(t, ts, 10, 20)
	gate := gateRanges(t, ts, nil)

	var wg sync.WaitGroup
	errs := make(chan error, 2*len(conns))
	for i, c := range conns {
		wg.Go(func() { // a sync from seq i: i+1..20
			if _, err := ts.svc.Sync(ts.ctx, c, map[string]int64{g: int64(i)}, nil); err != nil {
				errs <- err
			}
		})
		wg.Go(func() { // a latest page of i+1 messages: 20-i..20
			p, err := ts.svc.History(ts.ctx, c.user, g, Anchor{}, i+1)
			switch {
			case err != nil:
				errs <- err
			case len(p.Messages) != i+1 || p.Messages[0].Seq != int64(20-i):
				errs <- fmt.Errorf("a page of %d from seq %d holds %d messages from seq %d",
					i+1, 20-i, len(p.Messages), p.Messages[0].Seq)
			}
		})
	}
	// Every range reaches the store while the others are held there: none waits for another.
	waitUntil(t, func() string {
		_, inside, _ := gate.counts()
		return fmt.Sprintf("%d of %d different ranges in the store at once", inside, 2*len(conns))
	}, func() bool { _, inside, _ := gate.counts(); return inside == 2*len(conns) })
	gate.open()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, c := range conns {
		if got := c.seqs(t, g); !slices.Equal(got, seqsUpTo(20)[i:]) {
			t.Errorf("%s synced from %d replayed seqs %v", c.user, i, got)
		}
	}
}

// TestSyncReadsAreBounded: a hundred connections sync a hundred different conversations at once
// with a limit of four sync reads: four reach the store, the rest queue for a slot, and meanwhile
// history and sends of another user go on. Once the store answers, every sync completes.
func TestSyncReadsAreBounded(t *testing.T) {
	const limit, syncs = 4, 100
	ts := newTestServiceWith(t, Config{MaxConcurrentSyncReads: limit, MaxConnectionsPerUser: syncs + 1}, hub.Config{})
	ts.connect("alice")
	ts.connect("bob")
	dm := ts.dm("bob", "carol")
	ts.send("bob", dm, "1")
	var groups []string
	for range syncs {
		groups = append(groups, ts.group("alice", "carol"))
	}
	conns := make([]*fakeConn, syncs)
	for i := range conns {
		conns[i] = ts.open("alice")
	}
	gate := gateRanges(t, ts, func(from, to int64) bool { return to-from+1 == DefaultSyncLimit })

	var wg sync.WaitGroup
	errs := make(chan error, syncs)
	for i, c := range conns {
		wg.Go(func() {
			if _, err := ts.svc.Sync(ts.ctx, c, map[string]int64{groups[i]: 0}, nil); err != nil {
				errs <- err
			}
		})
	}
	waitUntil(t, func() string {
		_, inside, _ := gate.counts()
		return fmt.Sprintf("%d sync reads in the store, want %d", inside, limit)
	}, func() bool { _, inside, _ := gate.counts(); return inside == limit })
	time.Sleep(50 * time.Millisecond) // room for a read past the limit to reach the store

	// Others are not starved while the syncs queue.
	page, err := ts.svc.History(ts.ctx, "bob", dm, Anchor{}, 10)
	if err != nil || len(page.Messages) != 1 {
		t.Errorf("bob's page while syncs queue: %d messages, err %v; want 1", len(page.Messages), err)
	}
	ts.send("bob", dm, "2")

	gate.open()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("sync: %v", err)
	}
	if total, _, most := gate.counts(); total != syncs || most != limit {
		t.Errorf("%d sync reads reached the store, at most %d at once; want %d, at most %d", total, most, syncs, limit)
	}
}

// TestQueuedSyncsShareOneRead: while the node's sync read slots are all taken, fifty identical
// syncs queue for one, and once one is free a single store read answers them all. The metrics
// count the 49 reads saved and the waits for a slot.
func TestQueuedSyncsShareOneRead(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := newTestServiceWith(t, Config{MaxConcurrentSyncReads: 1, Metrics: NewMetrics(reg)}, hub.Config{})
	g, conns := stormGroup(t, ts, 50, 5)
	other := ts.group("alice", "bob")
	bob := ts.open("bob")
	gate := gateRanges(t, ts, nil)

	// bob's sync of another group takes the only slot and is held in the store.
	bobDone := make(chan error, 1)
	go func() {
		_, err := ts.svc.Sync(ts.ctx, bob, map[string]int64{other: 0}, nil)
		bobDone <- err
	}()
	waitUntil(t, func() string { return "bob's sync read to reach the store" },
		func() bool { _, inside, _ := gate.counts(); return inside == 1 })

	errs, key := syncAllWaiting(t, ts, g, conns)
	gate.open()
	if err := <-bobDone; err != nil {
		t.Fatalf("bob's sync: %v", err)
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatalf("sync: %v", err)
		}
	}
	if reads := gate.readsOf(key); reads != 1 {
		t.Errorf("%d queued identical syncs cost %d store reads, want 1", len(conns), reads)
	}
	if shared := promtest.Read(t, reg, "chatd_store_reads_shared_total").Value; shared != float64(len(conns)-1) {
		t.Errorf("chatd_store_reads_shared_total is %v, want %d", shared, len(conns)-1)
	}
	// Each member's connection took a slot to load, and its sync one to list its conversations.
	if waits := promtest.Read(t, reg, "chatd_sync_read_wait_seconds").Count; waits < uint64(2*len(conns)) {
		t.Errorf("chatd_sync_read_wait_seconds counted %d waits, want at least %d", waits, 2*len(conns))
	}
	for _, c := range conns {
		if got := c.seqs(t, g); !slices.Equal(got, seqsUpTo(5)) {
			t.Fatalf("%s replayed seqs %v, want 1..5", c.user, got)
		}
	}
}

// TestCancelledSyncReturnsPromptly: a sync whose context ends while it waits, for a read others
// share or for a sync read slot, returns at once with its context's error; the others still get
// their replay, and a read nobody waits for any more never reaches the store.
func TestCancelledSyncReturnsPromptly(t *testing.T) {
	ts := newTestServiceWith(t, Config{MaxConcurrentSyncReads: 1}, hub.Config{})
	g, conns := stormGroup(t, ts, 3, 5)
	lonely := ts.group("alice", "bob")
	bob := ts.open("bob") // before the slot is taken: opening reads the store in one too
	gate := gateRanges(t, ts, nil)
	key := messageRange{g, 1, DefaultSyncLimit}

	// The first sync's read takes the only slot and is held in the store; the second waits to
	// share the next read.
	first := make(chan error, 1)
	go func() {
		_, err := ts.svc.Sync(ts.ctx, conns[0], map[string]int64{g: 0}, nil)
		first <- err
	}()
	waitUntil(t, func() string { return "the first sync's read to reach the store" },
		func() bool { return gate.readsOf(key) == 1 })
	second := make(chan error, 1)
	go func() {
		_, err := ts.svc.Sync(ts.ctx, conns[1], map[string]int64{g: 0}, nil)
		second <- err
	}()
	waitUntil(t, func() string { return "the second sync to wait" },
		func() bool { return ts.svc.syncRanges.waitingFor(key) == 2 })

	for _, tc := range []struct {
		name    string
		since   map[string]int64
		conn    *fakeConn
		waiting func() bool // the sync waits
	}{
		{"sharing the next read", map[string]int64{g: 0}, conns[2],
			func() bool { return ts.svc.syncRanges.waitingFor(key) == 3 }},
		{"waiting for a slot", map[string]int64{lonely: 0}, bob,
			func() bool { return ts.svc.syncRanges.waitingFor(messageRange{lonely, 1, DefaultSyncLimit}) == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ts.ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := ts.svc.Sync(ctx, tc.conn, tc.since, nil)
				done <- err
			}()
			waitUntil(t, func() string { return "the sync to wait" }, tc.waiting)
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled sync returned %v, want its context's error", err)
				}
			case <-time.After(time.Second):
				t.Fatal("a cancelled sync still waits for the store")
			}
		})
	}

	gate.open()
	for i, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatalf("sync %d: %v", i+1, err)
		}
		if got := conns[i].seqs(t, g); !slices.Equal(got, seqsUpTo(5)) {
			t.Errorf("%s replayed seqs %v, want 1..5", conns[i].user, got)
		}
	}
	if reads := gate.readsOf(messageRange{lonely, 1, DefaultSyncLimit}); reads != 0 {
		t.Errorf("the abandoned sync's read reached the store %d times, want never", reads)
	}
}

// snapshotStore is the fake store whose MessageRange reads at once and answers only when its gate
// opens: a slow store's read that began before what happens meanwhile.
type snapshotStore struct {
	*fakeStore
	gate chan struct{}
}

func (s *snapshotStore) MessageRange(ctx context.Context, convID string, from, to int64) ([]storage.Message, error) {
	msgs, err := s.fakeStore.MessageRange(ctx, convID, from, to)
	<-s.gate
	return msgs, err
}

// TestSyncDoesNotShareAReadThatBegan: a sync that arrives while an identical read is already
// running in the store does not take that read's answer, which may predate a message whose live
// push the late sync's connection never got. Carol's sync reads while seq 6 is not stored yet;
// seq 6 is stored and pushed; bob connects after the push and syncs from the same seq as carol,
// while her read still runs. Bob must get seq 6 from the store, carol from her held push.
func TestSyncDoesNotShareAReadThatBegan(t *testing.T) {
	ts := newTestService(t)
	ts.connect("alice")
	g := ts.group("alice", "bob", "carol")
	for i := 1; i <= 5; i++ {
		ts.send("alice", g, fmt.Sprint(i))
	}
	store := &snapshotStore{fakeStore: ts.store, gate: make(chan struct{})}
	ts.svc.messaging.store = store // the sync reads through messaging
	var once sync.Once
	open := func() { once.Do(func() { close(store.gate) }) }
	t.Cleanup(open)

	carol := ts.open("carol")
	carolDone := make(chan error, 1)
	go func() {
		_, err := ts.svc.Sync(ts.ctx, carol, map[string]int64{g: 5}, nil)
		carolDone <- err
	}()
	key := messageRange{g, 6, 5 + DefaultSyncLimit}
	waitUntil(t, func() string { return "carol's read to begin" }, func() bool {
		ts.svc.syncRanges.mu.Lock()
		defer ts.svc.syncRanges.mu.Unlock()
		kr := ts.svc.syncRanges.keys[key]
		return kr != nil && kr.running.sealed
	})
	ts.send("alice", g, "6") // stored after carol's read began; pushed before bob connects

	bob := ts.open("bob")
	bobDone := make(chan error, 1)
	go func() {
		_, err := ts.svc.Sync(ts.ctx, bob, map[string]int64{g: 5}, nil)
		bobDone <- err
	}()
	waitUntil(t, func() string { return "bob's sync to wait" },
		func() bool { return ts.svc.syncRanges.waitingFor(key) == 2 })
	open()
	for _, done := range []chan error{carolDone, bobDone} {
		if err := <-done; err != nil {
			t.Fatalf("sync: %v", err)
		}
	}
	for _, c := range []*fakeConn{carol, bob} {
		if got := c.seqs(t, g); !slices.Equal(got, []int64{6}) {
			t.Errorf("%s got seqs %v after syncing from 5, want [6]", c.user, got)
		}
	}
}

// TestMaxConcurrentSyncReadsConfig: zero takes the default, a negative limit is refused.
func TestMaxConcurrentSyncReadsConfig(t *testing.T) {
	if err := (Config{MaxConcurrentSyncReads: -1}).Validate(); err == nil {
		t.Error("a negative MaxConcurrentSyncReads was accepted")
	}
	if got := (Config{}).withDefaults().MaxConcurrentSyncReads; got != DefaultMaxConcurrentSyncReads {
		t.Errorf("the zero MaxConcurrentSyncReads became %d, want %d", got, DefaultMaxConcurrentSyncReads)
	}
	if got := DefaultConfig().MaxConcurrentSyncReads; got != DefaultMaxConcurrentSyncReads {
		t.Errorf("DefaultConfig has MaxConcurrentSyncReads %d, want %d", got, DefaultMaxConcurrentSyncReads)
	}
}

// syncAllWaiting starts a sync of each of conns from the start of g and returns once every one
// waits for the same store read of g's first page (key); their results come on errs.
func syncAllWaiting(t *testing.T, ts *testService, g string, conns []*fakeConn) (errs chan error, key messageRange) {
	t.Helper()
	errs = make(chan error, len(conns))
	for _, c := range conns {
		go func() {
			_, err := ts.svc.Sync(ts.ctx, c, map[string]int64{g: 0}, nil)
			errs <- err
		}()
	}
	key = messageRange{g, 1, DefaultSyncLimit}
	waitUntil(t, func() string {
		return fmt.Sprintf("%d of %d syncs waiting for the read of the first page", ts.svc.syncRanges.waitingFor(key), len(conns))
	}, func() bool { return ts.svc.syncRanges.waitingFor(key) == len(conns) })
	return errs, key
}
