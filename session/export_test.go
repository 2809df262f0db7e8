package session

import "time"

// SetWriterStall sets how long a pooled worker may spend on one session before another starts
// beside it, so that a test can keep the pool from growing.
func SetWriterStall(w *Writers, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stallTimeout = d
}

// EnqueueTurn gives w's pool a turn that runs f, so that a test can watch how the pool runs
// turns without sockets.
func EnqueueTurn(w *Writers, f func()) { w.enqueue(funcTurn(f)) }

type funcTurn func()

func (f funcTurn) writeTurn() { f() }

// PoolState reports the pool's workers and the turns waiting for them.
func PoolState(w *Writers) (workers, queued int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.workers), w.queue.len()
}

// QueuedBytes reports the bytes of must-deliver frames waiting for s's writer.
func (s *Session) QueuedBytes() int {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	return s.out.pushBytes + s.out.replyBytes
}

// EphemeralDropped reports how many ephemeral frames s coalesced into a newer one or dropped.
func (s *Session) EphemeralDropped() int64 {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	return s.out.dropped
}
