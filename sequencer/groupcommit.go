package sequencer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/chatd/chatd/storage"
)

// A partition's flush is a group commit of the sends waiting on that partition. But a node owns
// many partitions, and at a given moment several of them are writing a batch of one or two sends
// each: each batch is a store statement of its own, and on the embedded store (FerretDB v1 on
// SQLite) every statement is a transaction that costs about a millisecond of the store's CPU,
// nearly whatever it holds (docs/BENCHMARKS.md, "Issue 33 targets"). So the node's partitions
// write through a second group commit: the claims inserts that are waiting when the store is
// free become one ordered InsertMany, and the counter raises one bulk write. Nothing waits for
// company: a write finding the store free goes at once, and the writes that arrive meanwhile
// form the next round, so rounds grow with the load, as a partition's batches do.

// mergingStore is the Store with the writes of partitions' flushes merged and made one at a
// time: InsertMessages and AdvanceCounters merged across partitions, SealBucket between them.
// One at a time because the embedded store has one writer (SQLite): two writes at once make the
// second wait in SQLite's busy handler, which sleeps for milliseconds, where here it waits for
// the first write only, and merges with the writes that come meanwhile.
type mergingStore struct {
	Store
	writing  sync.Mutex // held by the write under way
	inserts  commitQueue[insertCall]
	counters commitQueue[map[string]storage.Counters]
}

// insertCall is one partition's messages to insert in a round and, if set, the counters to raise
// once they are all stored, right after the round's insert. A flush is then one visit to the
// store, not two: apart, its counters would wait for the counter raises already waiting, and for
// the next round of inserts, which the other partitions' inserts would make meanwhile.
type insertCall struct {
	msgs     []storage.Message
	counters func() map[string]storage.Counters // called on the round's goroutine, while the caller waits
}

// countersError is InsertAdvancing's failure to raise the counters of the messages it stored.
type countersError struct{ err error }

func (e *countersError) Error() string { return "raise counters: " + e.err.Error() }
func (e *countersError) Unwrap() error { return e.err }

// newMergingStore merges rounds of at most maxRound messages (or conversations), each bounded by
// timeout; a single write larger than that goes alone.
func newMergingStore(store Store, maxRound int, timeout time.Duration) *mergingStore {
	m := &mergingStore{Store: store}
	m.inserts = commitQueue[insertCall]{maxRound: maxRound, size: func(c insertCall) int { return len(c.msgs) },
		run: func(calls []*commitCall[insertCall]) { m.insertRound(timeout, calls) }}
	m.counters = commitQueue[map[string]storage.Counters]{maxRound: maxRound, size: func(c map[string]storage.Counters) int { return len(c) },
		run: func(calls []*commitCall[map[string]storage.Counters]) { m.countersRound(timeout, calls) }}
	return m
}

// InsertMessages stores msgs as Store.InsertMessages does, in one insert with the other
// partitions' messages waiting at the same moment. A *storage.DuplicateError's Index counts
// within msgs, as the caller expects.
func (m *mergingStore) InsertMessages(ctx context.Context, msgs []storage.Message) error {
	return m.inserts.do(ctx, insertCall{msgs: msgs})
}

// InsertAdvancing stores msgs as InsertMessages does and, once they are all stored, raises the
// counters that counters then returns, in the same visit to the store: in one bulk write with the
// counters of the round's other partitions, right after the round's insert. counters runs on
// another goroutine while InsertAdvancing waits, and only if every message was stored. A failure
// to raise them is a *countersError; any other error is the insert's, and no counters were asked
// for.
func (m *mergingStore) InsertAdvancing(ctx context.Context, msgs []storage.Message, counters func() map[string]storage.Counters) error {
	return m.inserts.do(ctx, insertCall{msgs: msgs, counters: counters})
}

// AdvanceCounters raises counters as Store.AdvanceCounters does, in one bulk write with the
// other partitions' raises waiting at the same moment. Each conversation belongs to one
// partition, whose flushes run one at a time, so no two raises of a round share a conversation.
func (m *mergingStore) AdvanceCounters(ctx context.Context, counters map[string]storage.Counters) error {
	return m.counters.do(ctx, counters)
}

// SealBucket seals a full bucket as Store.SealBucket does, between the rounds.
func (m *mergingStore) SealBucket(ctx context.Context, msgs []storage.Message) error {
	m.writing.Lock()
	defer m.writing.Unlock()
	return m.Store.SealBucket(ctx, msgs)
}

// insertRound inserts the calls' messages in call order with ordered inserts: a duplicate ends
// the insert at its message, so the calls before it are stored, its own call learns where, and
// the calls after it go again in the next insert. Then it raises the counters of the calls stored
// that have any, in one bulk write, before another write can come between.
func (m *mergingStore) insertRound(timeout time.Duration, calls []*commitCall[insertCall]) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m.writing.Lock()
	defer m.writing.Unlock()
	var advancing []*commitCall[insertCall]
	stored := func(c *commitCall[insertCall]) {
		if c.items.counters != nil {
			advancing = append(advancing, c)
		} else {
			c.finish(nil)
		}
	}
	for len(calls) > 0 {
		var all []storage.Message
		for _, c := range calls {
			all = append(all, c.items.msgs...)
		}
		err := m.Store.InsertMessages(ctx, all)
		var dup *storage.DuplicateError
		if err == nil || !errors.As(err, &dup) || dup.Index >= len(all) {
			for _, c := range calls {
				if err == nil {
					stored(c)
				} else {
					c.finish(err)
				}
			}
			break
		}
		start := 0
		for i, c := range calls {
			if dup.Index >= start+len(c.items.msgs) {
				stored(c)
				start += len(c.items.msgs)
				continue
			}
			c.finish(&storage.DuplicateError{Index: dup.Index - start, Err: dup.Err})
			calls = calls[i+1:]
			break
		}
	}
	if len(advancing) == 0 {
		return
	}
	all := make(map[string]storage.Counters)
	for _, c := range advancing {
		maps.Copy(all, c.items.counters())
	}
	var err error
	if len(all) > 0 { // none when every batch of the round runs ahead of its counters (ahead.go)
		if err = m.Store.AdvanceCounters(ctx, all); err != nil {
			err = &countersError{err: err}
		}
	}
	for _, c := range advancing {
		c.finish(err)
	}
}

// countersRound raises the counters of all calls in one bulk write; they share its outcome.
func (m *mergingStore) countersRound(timeout time.Duration, calls []*commitCall[map[string]storage.Counters]) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	all := calls[0].items
	if len(calls) > 1 {
		all = make(map[string]storage.Counters)
		for _, c := range calls {
			maps.Copy(all, c.items)
		}
	}
	m.writing.Lock()
	err := m.Store.AdvanceCounters(ctx, all)
	m.writing.Unlock()
	if err != nil && len(calls) > 1 {
		err = fmt.Errorf("with %d other partitions' batches: %w", len(calls)-1, err)
	}
	for _, c := range calls {
		c.finish(err)
	}
}

// commitQueue runs one kind of write for many callers, one round at a time. The caller that finds
// no round running leads one: it takes every call waiting (its own first) up to maxRound items,
// runs them together, and hands the lead to the oldest call still waiting, which runs the next
// round with all that came meanwhile. So each call is in exactly one round, rounds run one after
// another, and no caller runs rounds for others after its own is done.
type commitQueue[T any] struct {
	maxRound int
	size     func(T) int
	run      func([]*commitCall[T]) // finishes every call it is given

	mu      sync.Mutex
	waiting []*commitCall[T]
	running bool
}

type commitCall[T any] struct {
	items T
	err   error
	done  chan struct{} // closed once err is set
	lead  chan struct{} // closed when this call is to lead the next round
}

func (c *commitCall[T]) finish(err error) {
	c.err = err
	close(c.done)
}

// do writes items in a round and returns the round's outcome for them. It waits for the round
// running, if any, and then its own, each bounded by the round's timeout; if ctx ends before its
// items are taken into a round, it gives up without writing them.
func (q *commitQueue[T]) do(ctx context.Context, items T) error {
	c := &commitCall[T]{items: items, done: make(chan struct{}), lead: make(chan struct{})}
	q.mu.Lock()
	q.waiting = append(q.waiting, c)
	leads := !q.running
	q.running = true
	q.mu.Unlock()
	if !leads {
		select {
		case <-c.done:
			return c.err
		case <-c.lead:
		case <-ctx.Done():
			if q.withdraw(c) {
				return fmt.Errorf("wait for the store: %w", ctx.Err())
			}
			select { // in a round already, or just handed the lead: see it through
			case <-c.done:
				return c.err
			case <-c.lead:
			}
		}
	}
	q.run(q.take())
	q.mu.Lock()
	if len(q.waiting) > 0 {
		close(q.waiting[0].lead)
	} else {
		q.running = false
	}
	q.mu.Unlock()
	<-c.done // the oldest waiting, so in the round just run
	return c.err
}

// withdraw takes c out of the waiting calls, unless a round has taken it or it is to lead the
// next one.
func (q *commitQueue[T]) withdraw(c *commitCall[T]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.Index(q.waiting, c)
	if i < 0 || isClosed(c.lead) {
		return false
	}
	q.waiting = slices.Delete(q.waiting, i, i+1)
	return true
}

// take removes the next round's calls from the waiting ones: the oldest, and those after it while
// the round stays within maxRound items.
func (q *commitQueue[T]) take() []*commitCall[T] {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, total := 1, q.size(q.waiting[0].items)
	for n < len(q.waiting) && total+q.size(q.waiting[n].items) <= q.maxRound {
		total += q.size(q.waiting[n].items)
		n++
	}
	round := q.waiting[:n:n]
	q.waiting = slices.Clone(q.waiting[n:]) // holds no finished call
	return round
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
