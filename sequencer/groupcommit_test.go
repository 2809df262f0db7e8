package sequencer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatd/chatd/storage"
)

// gatedStore records the inserts and counter raises it is given; each waits for a token on gate,
// so a test can hold the store busy while more writes arrive. A message whose ClientMsgID is in
// taken is refused as a duplicate, as the store refuses a seq claimed already.
type gatedStore struct {
	Store
	gate  chan struct{}
	taken map[string]bool

	mu       sync.Mutex
	inserts  [][]string // client ids per insert
	counters [][]string // conversation ids per raise, sorted
	writes   []string   // both kinds in the order written: "insert a b", "raise c-a"
}

func (s *gatedStore) InsertMessages(_ context.Context, msgs []storage.Message) error {
	<-s.gate
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ClientMsgID)
	}
	s.inserts = append(s.inserts, ids)
	s.writes = append(s.writes, strings.Join(append([]string{"insert"}, ids...), " "))
	for i, m := range msgs {
		if s.taken[m.ClientMsgID] {
			return &storage.DuplicateError{Index: i, Err: errors.New("E11000")}
		}
	}
	return nil
}

func (s *gatedStore) AdvanceCounters(_ context.Context, counters map[string]storage.Counters) error {
	<-s.gate
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range counters {
			if !yield(id) {
				return
			}
		}
	})
	s.counters = append(s.counters, ids)
	s.writes = append(s.writes, strings.Join(append([]string{"raise"}, ids...), " "))
	if slices.Contains(ids, "broken") {
		return errors.New("store down")
	}
	return nil
}

func (s *gatedStore) recorded() ([][]string, [][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.inserts), slices.Clone(s.counters)
}

func messages(ids ...string) []storage.Message {
	var out []storage.Message
	for _, id := range ids {
		out = append(out, storage.Message{ConversationID: "c-" + id, ClientMsgID: id})
	}
	return out
}

// whileBusy starts first (which takes the store and holds it), then, once first is in the store,
// the calls of rest, each on its goroutine, and lets the store go once all of them are waiting.
// It returns each call's error, first's at index 0.
func whileBusy(t *testing.T, store *gatedStore, m *mergingStore, first func() error, rest ...func() error) []error {
	t.Helper()
	errs := make([]error, 1+len(rest))
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = first() })
	waitUntil(t, "the first write to wait in the store", func() bool { return queued(m) == 0 && running(m) })
	for i, call := range rest {
		wg.Go(func() { errs[i+1] = call() })
		waitUntil(t, fmt.Sprintf("write %d to queue behind the first", i+2), func() bool { return queued(m) == i+1 })
	}
	close(store.gate)
	wg.Wait()
	return errs
}

func queued(m *mergingStore) int {
	m.inserts.mu.Lock()
	defer m.inserts.mu.Unlock()
	m.counters.mu.Lock()
	defer m.counters.mu.Unlock()
	return len(m.inserts.waiting) + len(m.counters.waiting)
}

func running(m *mergingStore) bool {
	m.inserts.mu.Lock()
	defer m.inserts.mu.Unlock()
	m.counters.mu.Lock()
	defer m.counters.mu.Unlock()
	return m.inserts.running || m.counters.running
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWritesWaitingTogetherGoInOneStoreCall(t *testing.T) {
	store := &gatedStore{gate: make(chan struct{})}
	m := newMergingStore(store, 100, time.Minute)
	ctx := context.Background()
	insert := func(ids ...string) func() error {
		return func() error { return m.InsertMessages(ctx, messages(ids...)) }
	}
	errs := whileBusy(t, store, m, insert("a"), insert("b1", "b2"), insert("c"))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	inserts, _ := store.recorded()
	if want := [][]string{{"a"}, {"b1", "b2", "c"}}; !slices.EqualFunc(inserts, want, slices.Equal) {
		t.Fatalf("the store was given inserts %v; want the first alone, then the two that waited together %v", inserts, want)
	}
}

func TestADuplicateInAMergedInsertIsAnsweredToItsOwnCall(t *testing.T) {
	store := &gatedStore{gate: make(chan struct{}), taken: map[string]bool{"b2": true}}
	m := newMergingStore(store, 100, time.Minute)
	ctx := context.Background()
	insert := func(ids ...string) func() error {
		return func() error { return m.InsertMessages(ctx, messages(ids...)) }
	}
	errs := whileBusy(t, store, m, insert("a"), insert("b1", "b2", "b3"), insert("c"))
	var dup *storage.DuplicateError
	if !errors.As(errs[1], &dup) || dup.Index != 1 {
		t.Fatalf("the call holding the duplicate got %v; want a duplicate at its own index 1", errs[1])
	}
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("calls without a duplicate got %v", errs)
	}
	inserts, _ := store.recorded()
	// The duplicate ends the merged insert there: the call after it goes again, alone.
	if want := [][]string{{"a"}, {"b1", "b2", "b3", "c"}, {"c"}}; !slices.EqualFunc(inserts, want, slices.Equal) {
		t.Fatalf("the store was given inserts %v; want %v", inserts, want)
	}
}

func TestMergedCounterRaisesShareTheirOutcome(t *testing.T) {
	store := &gatedStore{gate: make(chan struct{})}
	m := newMergingStore(store, 100, time.Minute)
	ctx := context.Background()
	raise := func(id string) func() error {
		return func() error { return m.AdvanceCounters(ctx, map[string]storage.Counters{id: {LastSeq: 1}}) }
	}
	errs := whileBusy(t, store, m, raise("first"), raise("broken"), raise("other"))
	if errs[0] != nil {
		t.Fatalf("the raise written alone: %v", errs[0])
	}
	if errs[1] == nil || errs[2] == nil {
		t.Fatalf("raises written in one failed bulk write got %v; want both failed", errs[1:])
	}
	_, counters := store.recorded()
	if want := [][]string{{"first"}, {"broken", "other"}}; !slices.EqualFunc(counters, want, slices.Equal) {
		t.Fatalf("the store was given raises %v; want %v", counters, want)
	}
}

// insertAdvancing is a partition's flush of ids: its messages, then a raise of their
// conversations' counters, which it reports asked for in asked.
func insertAdvancing(m *mergingStore, asked *sync.Map, ids ...string) func() error {
	return func() error {
		return m.InsertAdvancing(context.Background(), messages(ids...), func() map[string]storage.Counters {
			counters := make(map[string]storage.Counters)
			for _, msg := range messages(ids...) {
				counters[msg.ConversationID] = storage.Counters{LastSeq: 1}
				asked.Store(msg.ClientMsgID, true)
			}
			return counters
		})
	}
}

func TestAFlushRaisesItsCountersInTheVisitThatStoresItsMessages(t *testing.T) {
	store := &gatedStore{gate: make(chan struct{})}
	m := newMergingStore(store, 100, time.Minute)
	var asked sync.Map
	errs := whileBusy(t, store, m, insertAdvancing(m, &asked, "a"), insertAdvancing(m, &asked, "b"), insertAdvancing(m, &asked, "c"))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
	}
	store.mu.Lock()
	writes := slices.Clone(store.writes)
	store.mu.Unlock()
	// Each insert is followed at once by the raise of its flushes' counters, merged.
	if want := []string{"insert a", "raise c-a", "insert b c", "raise c-b c-c"}; !slices.Equal(writes, want) {
		t.Fatalf("the store was given %q; want %q", writes, want)
	}
}

func TestAFlushWithADuplicateIsAskedForNoCounters(t *testing.T) {
	store := &gatedStore{gate: make(chan struct{}), taken: map[string]bool{"b2": true}}
	m := newMergingStore(store, 100, time.Minute)
	var asked sync.Map
	errs := whileBusy(t, store, m, insertAdvancing(m, &asked, "a"), insertAdvancing(m, &asked, "b1", "b2"), insertAdvancing(m, &asked, "c"))
	var dup *storage.DuplicateError
	if !errors.As(errs[1], &dup) || dup.Index != 1 {
		t.Fatalf("the flush holding the duplicate got %v; want a duplicate at its own index 1", errs[1])
	}
	if _, ok := asked.Load("b1"); ok {
		t.Fatal("the flush holding the duplicate was asked for its counters; want it left to sort the duplicate out first")
	}
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("flushes without a duplicate got %v", errs)
	}
	store.mu.Lock()
	writes := slices.Clone(store.writes)
	store.mu.Unlock()
	if want := []string{"insert a", "raise c-a", "insert b1 b2 c", "insert c", "raise c-c"}; !slices.Equal(writes, want) {
		t.Fatalf("the store was given %q; want %q", writes, want)
	}
}

func TestAFailedRaiseAfterAStoredInsertIsACountersError(t *testing.T) {
	store := &gatedStore{gate: make(chan struct{})}
	close(store.gate)
	m := newMergingStore(store, 100, time.Minute)
	err := m.InsertAdvancing(context.Background(), messages("x"), func() map[string]storage.Counters {
		return map[string]storage.Counters{"broken": {LastSeq: 1}}
	})
	var notRaised *countersError
	if !errors.As(err, &notRaised) {
		t.Fatalf("a flush whose messages were stored and whose raise failed got %v; want a *countersError", err)
	}
	if inserts, _ := store.recorded(); len(inserts) != 1 {
		t.Fatalf("the store was given inserts %v; want the one", inserts)
	}
}

func TestAWriteGivenUpBeforeItsRoundIsNotWritten(t *testing.T) {
	store := &gatedStore{gate: make(chan struct{})}
	m := newMergingStore(store, 100, time.Minute)
	var wg sync.WaitGroup
	var firstErr error
	wg.Go(func() { firstErr = m.InsertMessages(context.Background(), messages("a")) })
	waitUntil(t, "the first write to wait in the store", func() bool { return queued(m) == 0 && running(m) })
	ctx, cancel := context.WithCancel(context.Background())
	lateErr := make(chan error, 1)
	go func() { lateErr <- m.InsertMessages(ctx, messages("late")) }()
	waitUntil(t, "the second write to queue", func() bool { return queued(m) == 1 })
	cancel()
	if err := <-lateErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("a write given up while waiting returned %v; want context.Canceled", err)
	}
	close(store.gate)
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("first write: %v", firstErr)
	}
	inserts, _ := store.recorded()
	if want := [][]string{{"a"}}; !slices.EqualFunc(inserts, want, slices.Equal) {
		t.Fatalf("the store was given inserts %v; want only the first", inserts)
	}
	// The queue goes on: a later write is written.
	if err := m.InsertMessages(context.Background(), messages("next")); err != nil {
		t.Fatalf("a write after one given up: %v", err)
	}
}

func TestWritesOfBothKindsReachTheStoreOneAtATime(t *testing.T) {
	var mu sync.Mutex
	inStore, most := 0, 0
	enter := func() {
		mu.Lock()
		inStore++
		most = max(most, inStore)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		inStore--
		mu.Unlock()
	}
	store := &countingStore{enter: enter}
	m := newMergingStore(store, 100, time.Minute)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { _ = m.InsertMessages(context.Background(), messages(fmt.Sprint(i))) })
		wg.Go(func() {
			_ = m.AdvanceCounters(context.Background(), map[string]storage.Counters{fmt.Sprint(i): {LastSeq: 1}})
		})
		wg.Go(func() { _ = m.SealBucket(context.Background(), messages(fmt.Sprint(i))) })
	}
	wg.Wait()
	if most != 1 {
		t.Fatalf("%d writes were in the store at once; want one at a time", most)
	}
}

type countingStore struct {
	Store
	enter func()
}

func (s *countingStore) InsertMessages(context.Context, []storage.Message) error {
	s.enter()
	return nil
}

func (s *countingStore) AdvanceCounters(context.Context, map[string]storage.Counters) error {
	s.enter()
	return nil
}

func (s *countingStore) SealBucket(context.Context, []storage.Message) error {
	s.enter()
	return nil
}
