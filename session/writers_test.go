package session

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// turnTimeout bounds every wait here; the turns take milliseconds when the pool works.
const turnTimeout = 30 * time.Second

// fakeTurn records how many fake turns run at once and can be held until released.
type fakeTurn struct {
	running, most *atomic.Int64
	hold          time.Duration // how long the turn takes
	release       chan struct{} // if not nil, the turn also waits for it
	done          *sync.WaitGroup
}

func (f fakeTurn) writeTurn() {
	n := f.running.Add(1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	time.Sleep(f.hold)
	if f.release != nil {
		<-f.release
	}
	f.running.Add(-1)
	f.done.Done()
}

// waitGroup waits for wg, failing the test after turnTimeout with what was awaited.
func waitGroup(t *testing.T, what string, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(turnTimeout):
		t.Fatalf("timed out after %v waiting for %s", turnTimeout, what)
	}
}

// waitIdle waits until the pool has no worker left.
func waitIdle(t *testing.T, w *Writers) {
	t.Helper()
	deadline := time.Now().Add(turnTimeout)
	for {
		w.mu.Lock()
		n, queued := len(w.workers), w.queue.len()
		w.mu.Unlock()
		if n == 0 && queued == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool still has %d workers and %d turns queued after %v", n, queued, turnTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// The pool takes its turns on at most Pooled workers at once, and its workers end with the queue.
func TestPoolRunsTurnsOnItsWorkersOnly(t *testing.T) {
	for _, pooled := range []int{1, 2} {
		t.Run(fmt.Sprintf("pooled=%d", pooled), func(t *testing.T) {
			w := NewWriters(WritersConfig{Pooled: pooled})
			SetWriterStall(w, time.Hour) // no turn counts as stalled
			var running, most atomic.Int64
			var done sync.WaitGroup
			const turns = 40
			done.Add(turns)
			for range turns {
				w.enqueue(fakeTurn{running: &running, most: &most, hold: time.Millisecond, done: &done})
			}
			waitGroup(t, "every turn", &done)
			if got := most.Load(); got != int64(pooled) {
				t.Errorf("%d turns ran at once, want %d", got, pooled)
			}
			waitIdle(t, w)
		})
	}
}

// A turn that does not end (a peer that stopped reading) gets a worker started beside it, so the
// turns queued behind it run; once it ends, the pool goes back to its size while turns still wait.
func TestPoolStartsAWorkerBesideAStalledTurn(t *testing.T) {
	w := NewWriters(WritersConfig{Pooled: 1})
	var running, most atomic.Int64
	var stalled, first, behind sync.WaitGroup
	release := make(chan struct{})
	stalled.Add(1)
	w.enqueue(fakeTurn{running: &running, most: &most, release: release, done: &stalled})
	first.Add(1)
	w.enqueue(fakeTurn{running: &running, most: &most, done: &first})
	// About a second of turns for the one worker that should be left once the stall ends.
	const turns = 1000
	behind.Add(turns)
	for range turns {
		w.enqueue(fakeTurn{running: &running, most: &most, hold: time.Millisecond, done: &behind})
	}
	waitGroup(t, "the first turn queued behind the stalled one", &first)
	close(release)
	waitGroup(t, "the stalled turn", &stalled)

	deadline := time.Now().Add(turnTimeout)
	for {
		w.mu.Lock()
		workers, queued := len(w.workers), w.queue.len()
		w.mu.Unlock()
		if workers == 1 {
			break
		}
		if queued == 0 || time.Now().After(deadline) {
			t.Fatalf("the pool still had %d workers with %d turns queued, want 1 soon after the stall ended", workers, queued)
		}
		time.Sleep(time.Millisecond)
	}
	waitGroup(t, "the turns queued behind", &behind)
	waitIdle(t, w)
}
