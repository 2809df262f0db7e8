package session_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/testenv"
)

// turns counts a group of fake turns: how many ran to the end, and the most that ran at once.
type turns struct{ done, running, most atomic.Int64 }

// turn returns a turn that takes hold, then waits for release if it is not nil.
func (g *turns) turn(hold time.Duration, release <-chan struct{}) func() {
	return func() {
		n := g.running.Add(1)
		for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
		}
		time.Sleep(hold)
		if release != nil {
			<-release
		}
		g.running.Add(-1)
		g.done.Add(1)
	}
}

// waitDone waits until at least n turns of g have run.
func (g *turns) waitDone(t *testing.T, what string, n int64) {
	t.Helper()
	eventually(t, what, func() (bool, string) {
		got := g.done.Load()
		return got >= n, fmt.Sprintf("%d of %d turns done", got, n)
	})
}

// waitPoolIdle waits until the pool has no worker left and nothing queued.
func waitPoolIdle(t *testing.T, w *session.Writers) {
	t.Helper()
	eventually(t, "the pool's workers to end", func() (bool, string) {
		workers, queued := session.PoolState(w)
		return workers == 0 && queued == 0, fmt.Sprintf("%d workers, %d turns queued", workers, queued)
	})
}

// The pool takes its turns on at most Pooled workers at once, and its workers end with the queue.
func TestPoolRunsTurnsOnItsWorkersOnly(t *testing.T) {
	for _, pooled := range []int{1, 2} {
		t.Run(fmt.Sprintf("pooled=%d", pooled), func(t *testing.T) {
			w := session.NewWriters(session.WritersConfig{Pooled: pooled})
			session.SetWriterStall(w, time.Hour) // no turn counts as stalled
			g := &turns{}
			const n = 40
			for range n {
				session.EnqueueTurn(w, g.turn(time.Millisecond, nil))
			}
			g.waitDone(t, "every turn", n)
			if got := g.most.Load(); got != int64(pooled) {
				t.Errorf("%d turns ran at once, want %d", got, pooled)
			}
			waitPoolIdle(t, w)
		})
	}
}

// A turn that does not end (a peer that stopped reading) gets a worker started beside it, so the
// turns queued behind it run; once it ends, the pool goes back to its size while turns still wait.
func TestPoolStartsAWorkerBesideAStalledTurn(t *testing.T) {
	w := session.NewWriters(session.WritersConfig{Pooled: 1})
	stalled, behind := &turns{}, &turns{}
	release := make(chan struct{})
	session.EnqueueTurn(w, stalled.turn(0, release))
	// About a second of turns for the one worker that should be left once the stall ends.
	const n = 1000
	for range n {
		session.EnqueueTurn(w, behind.turn(time.Millisecond, nil))
	}
	behind.waitDone(t, "the first turn queued behind the stalled one", 1)
	close(release)
	stalled.waitDone(t, "the stalled turn", 1)

	testenv.CheckFor(t, pollTimeout, time.Millisecond, func() error {
		workers, queued := session.PoolState(w)
		if workers == 1 {
			return nil
		}
		err := fmt.Errorf("the pool has %d workers with %d turns queued, want 1 soon after the stall ended", workers, queued)
		if queued == 0 {
			return fmt.Errorf("%w: %v", testenv.ErrGiveUp, err)
		}
		return err
	})
	behind.waitDone(t, "the turns queued behind", n)
	waitPoolIdle(t, w)
}
