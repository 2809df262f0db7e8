package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chatd/chatd/protocol"
)

// ErrClosed is returned by PushWait and Reply once the session is closing.
var ErrClosed = errors.New("session closed")

// outbox holds what waits for the writer: must-deliver frames in FIFO order, bounded in bytes,
// and ephemeral frames keyed so that a newer frame replaces a waiting one. Nothing is allocated
// until a frame waits, and the storage is let go when the writer empties it, so an idle
// connection costs a few words.
type outbox struct {
	limit int // MaxQueuedBytes
	mu    sync.Mutex
	// must holds the must-deliver frames not yet taken by the writer.
	must fifo[outFrame]
	// pushBytes counts Push frames queued or being written; it is what cuts a slow consumer.
	// replyBytes counts PushWait frames likewise; replies wait while the two together reach the
	// limit, so a client paces its own requests by reading, and pushes keep their own budget
	// while a long sync is being read.
	pushBytes, replyBytes int
	// overSince is when the Push bytes last rose past MaxQueuedBytes while the writer had not
	// brought them back under it; zero while under.
	overSince time.Time
	// graceTimer cuts the session once overSince is SlowConsumerGrace old. Push checks the grace
	// too, but a conversation that goes quiet pushes nothing more, and a reader too slow to drain
	// its queue would not be cut. It is armed when the Push bytes go over, stopped when the
	// writer brings them back under or the session closes, and made on the first spell over, so
	// a session that never falls behind has none.
	graceTimer *time.Timer
	// room, when not nil, is closed and cleared as soon as bytes are written: it wakes PushWait
	// callers waiting for the queue to drain. Waiters create it, so it costs nothing otherwise.
	room chan struct{}
	// eph maps a key to its waiting frame; ephOrder is the order keys were first queued.
	eph      map[string]*ephFrame
	ephOrder fifo[*ephFrame]
	// dropped counts ephemeral frames coalesced into a newer one or dropped for want of room.
	dropped int64
	// shut is set when the session closes: nothing more is queued.
	shut bool
	// opened is set once the handler's Opened succeeded: before that frames wait without a
	// writer, so a session refused at open sends its close code and nothing else.
	opened bool
	// writer says whether a writer runs or waits for the pool; it is what keeps writers one
	// at a time.
	writer writerState
	// gathering holds the must-deliver frames the writer has gathered (gather.go) and not yet
	// handed to the kernel: they stay counted until then.
	gathering []outFrame
}

// writerState is where a session's writer is.
type writerState int

const (
	writerIdle    writerState = iota // nothing waits, or the session is not open yet
	writerPooled                     // queued on Writers' pool, not yet taken
	writerRunning                    // writing, on a goroutine of its own or a pool worker
)

// outFrame is one must-deliver frame; push tells Push frames from replies for byte accounting.
type outFrame struct {
	data []byte
	push bool
}

// ephFrame is the latest frame waiting under one ephemeral key.
type ephFrame struct {
	key  string
	data []byte
}

// Push queues a frame that must reach the reader (a persisted message, a conversation, removed,
// hidden or deleted notice) without blocking. A reader may fall behind for a moment: the Push
// bytes waiting may pass MaxQueuedBytes. If they stay past it for SlowConsumerGrace, whether or
// not more frames are pushed, or reach slowConsumerHardFactor times it, the client cannot take
// what it must receive: the session is closed with StatusSlowConsumer (logged at warn, within the
// budget of cut lines). A Push that finds it so drops its frame and returns false; the client
// fills the gap with a sync when it reconnects. Push also returns false once the session is
// closing.
func (s *Session) Push(frame []byte) bool {
	q := &s.out
	q.mu.Lock()
	if q.shut {
		q.mu.Unlock()
		return false
	}
	if queued := q.pushBytes + len(frame); queued > s.cfg.MaxQueuedBytes {
		now := time.Now()
		if q.overSince.IsZero() {
			q.overSince = now
			s.armGrace()
		}
		behind := now.Sub(q.overSince)
		if queued > slowConsumerHardFactor*s.cfg.MaxQueuedBytes || behind > s.cfg.SlowConsumerGrace {
			q.mu.Unlock()
			s.cutSlowConsumer(queued, behind)
			return false
		}
	}
	q.must.push(outFrame{data: frame, push: true})
	q.pushBytes += len(frame)
	s.startWriter()
	q.mu.Unlock()
	return true
}

// armGrace starts the grace timer for a spell over MaxQueuedBytes that began just now; called
// with the outbox locked.
func (s *Session) armGrace() {
	q := &s.out
	if q.graceTimer == nil {
		q.graceTimer = time.AfterFunc(s.cfg.SlowConsumerGrace, s.graceExpired)
		return
	}
	q.graceTimer.Reset(s.cfg.SlowConsumerGrace)
}

// graceExpired runs on the grace timer's goroutine: it cuts the session if its Push bytes are
// still over MaxQueuedBytes and have been for SlowConsumerGrace.
func (s *Session) graceExpired() {
	q := &s.out
	q.mu.Lock()
	if q.shut || q.overSince.IsZero() {
		q.mu.Unlock() // closed, or the writer brought the queue back under in time
		return
	}
	behind := time.Since(q.overSince)
	if behind < s.cfg.SlowConsumerGrace {
		// The queue went under and over again while this call waited for the lock, too late
		// for Stop: the new spell gets its whole grace.
		q.graceTimer.Reset(s.cfg.SlowConsumerGrace - behind)
		q.mu.Unlock()
		return
	}
	queued := q.pushBytes
	q.mu.Unlock()
	s.cutSlowConsumer(queued, behind)
}

// cutSlowConsumer closes the session of a client that cannot take what it must receive, and
// logs and counts the cut once, whichever of Push and the grace timer finds it first. What waits
// for the client is let go at once: a cut client syncs from history when it reconnects, and its
// writer, blocked in a write it does not read, may hold on until WriteTimeout.
func (s *Session) cutSlowConsumer(queued int, behind time.Duration) {
	if s.closeWith(StatusSlowConsumer, "slow consumer: write queue full") {
		s.out.discard()
		s.cfg.Metrics.slowConsumerCut()
		s.cutLog(StatusSlowConsumer).Int("queuedBytes", queued).Dur("behind", behind).
			Msg("slow consumer: write queue full; closing")
	}
}

// PushWait queues a frame that answers the client's own request. It waits while the
// must-deliver bytes queued are at or over MaxQueuedBytes, so a client paces what it asked for
// by reading it; it never closes the session. It fails with ErrClosed when the session closes,
// or with ctx's error.
func (s *Session) PushWait(ctx context.Context, frame []byte) error {
	q := &s.out
	for {
		q.mu.Lock()
		if q.shut {
			q.mu.Unlock()
			return ErrClosed
		}
		if q.pushBytes+q.replyBytes < s.cfg.MaxQueuedBytes {
			q.must.push(outFrame{data: frame})
			q.replyBytes += len(frame)
			s.startWriter()
			q.mu.Unlock()
			return nil
		}
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-s.life.done:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("queue reply: %w", ctx.Err())
		}
	}
}

// Reply encodes f and queues it with PushWait.
func (s *Session) Reply(ctx context.Context, f protocol.ServerFrame) error {
	data, err := protocol.Encode(f)
	if err != nil {
		return fmt.Errorf("reply: %w", err)
	}
	return s.PushWait(ctx, data)
}

// PushEphemeral queues a frame that may be coalesced or dropped: typing, receipt pushes, badge
// updates, cursor moves. A frame whose key is already waiting replaces it in place, so the reader
// gets the latest value in the place of the first; keys name what the frame is the latest value
// of ("badge", "cursor:<conv>", "receipt:<conv>:<user>", "typing:<conv>:<user>"). Past
// MaxEphemeral waiting keys the frame is dropped. Ephemeral frames never block, never count
// toward MaxQueuedBytes and never close the session.
func (s *Session) PushEphemeral(key string, frame []byte) {
	q := &s.out
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shut {
		return
	}
	if e := q.eph[key]; e != nil {
		e.data = frame
		q.dropped++
		s.cfg.Metrics.ephemeralCoalesced()
		return
	}
	if q.ephOrder.len() >= s.cfg.MaxEphemeral {
		q.dropped++
		s.cfg.Metrics.ephemeralDropped()
		return
	}
	e := &ephFrame{key: key, data: frame}
	if q.eph == nil {
		q.eph = make(map[string]*ephFrame)
	}
	q.eph[key] = e
	q.ephOrder.push(e)
	s.startWriter()
}

// startWriter starts the writer for what was just queued, unless one runs or the session is not
// open yet: on a goroutine of its own if Writers lets one more run so, else on Writers' pool. A
// writer waiting for the pool starts on its own goroutine as soon as Writers lets it, so that a
// frame queued behind a large fan-out does not wait for the pool. startWriter is called with the
// outbox locked, so a writer is counted in s.writers before the session can be seen closed, and
// Serve, which waits for s.writers once closed, never misses one.
func (s *Session) startWriter() {
	q := &s.out
	if q.writer == writerRunning || !q.opened {
		return
	}
	if q.writer == writerIdle {
		s.writers.Add(1) // done when this writer ends, wherever it runs
	}
	if s.cfg.Writers.goDirect() {
		q.writer = writerRunning // a pool entry left behind finds it so and does nothing
		go s.writeLoop()
		return
	}
	if q.writer == writerIdle {
		q.writer = writerPooled
		s.cfg.Writers.enqueue(s)
	}
}

// claimTurn takes the writer for a pool worker, unless it started on a goroutine of its own
// since it was queued.
func (q *outbox) claimTurn() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.writer != writerPooled {
		return false
	}
	q.writer = writerRunning
	return true
}

// openOutbox lets writers run once Opened succeeded, and starts one for what was queued
// meanwhile, or to close a session closed during Opened.
func (s *Session) openOutbox() {
	q := &s.out
	q.mu.Lock()
	defer q.mu.Unlock()
	q.opened = true
	if q.shut || q.must.len() > 0 || q.ephOrder.len() > 0 {
		s.startWriter()
	}
}

// closeOutbox stops queueing (PushWait callers see the session done) and has a writer finish the
// session: the running one, or one started now. A session refused at open has none; Serve
// closes its connection itself.
func (s *Session) closeOutbox() {
	q := &s.out
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shut = true
	if q.graceTimer != nil {
		q.graceTimer.Stop() // a cut session has nothing more to cut; a call already due finds it shut
	}
	s.startWriter()
}

// round is what the writer does next.
type round struct {
	next            roundKind
	must, ephemeral int // for roundWrite: how many frames of each kind wait
}

type roundKind int

const (
	roundWrite  roundKind = iota // frames wait: write a round
	roundFinish                  // the session is closing: flush and send the close frame
	roundIdle                    // nothing waits: the writer ends, and the next frame queued starts one
)

// nextRound tells the writer what to do next; when it says roundIdle the writer is no longer
// counted as running, so the decision and the queue's state are taken under one lock.
func (q *outbox) nextRound() round {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.shut:
		return round{next: roundFinish}
	case q.must.len() > 0 || q.ephOrder.len() > 0:
		return round{next: roundWrite, must: q.must.len(), ephemeral: q.ephOrder.len()}
	default:
		q.writer = writerIdle
		q.gathering = nil // an idle session holds nothing
		return round{next: roundIdle}
	}
}

// takeMust returns the oldest waiting must-deliver frame. Its bytes stay counted until written.
func (q *outbox) takeMust() (outFrame, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.must.pop()
}

// gathered notes a must-deliver frame the writer has gathered; it stays counted until handedOver.
func (q *outbox) gathered(f outFrame) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.gathering = append(q.gathering, f)
}

// handedOver uncounts the gathered frames, which are going to the kernel now.
func (q *outbox) handedOver() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.uncount(q.gathering...)
	clear(q.gathering)
	q.gathering = q.gathering[:0]
}

// written uncounts a must-deliver frame the writer has written and wakes waiting replies.
func (q *outbox) written(f outFrame) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.uncount(f)
}

// uncount takes frames out of the queued bytes; called with the outbox locked.
func (q *outbox) uncount(frames ...outFrame) {
	if len(frames) == 0 {
		return
	}
	for _, f := range frames {
		if f.push {
			q.pushBytes -= len(f.data)
		} else {
			q.replyBytes -= len(f.data)
		}
	}
	if !q.overSince.IsZero() && q.pushBytes <= q.limit {
		q.overSince = time.Time{}
		q.graceTimer.Stop() // back under in time; only when going under, not every frame
	}
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
}

// takeEphemeral returns the waiting ephemeral frame whose key was queued first.
func (q *outbox) takeEphemeral() ([]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.ephOrder.pop()
	if !ok {
		return nil, false
	}
	delete(q.eph, e.key)
	if len(q.eph) == 0 {
		q.eph = nil // maps do not shrink; let a burst's buckets go
	}
	return e.data, true
}

// discard lets go of everything still waiting.
func (q *outbox) discard() {
	q.mu.Lock()
	defer q.mu.Unlock()
	// A frame the writer holds is counted until written says so, as it always is.
	for f, ok := q.must.pop(); ok; f, ok = q.must.pop() {
		if f.push {
			q.pushBytes -= len(f.data)
		} else {
			q.replyBytes -= len(f.data)
		}
	}
	q.must = fifo[outFrame]{}
	q.ephOrder = fifo[*ephFrame]{}
	q.eph = nil
}

// fifo is a queue in a slice that grows with use and is let go when it empties.
type fifo[T any] struct {
	items []T
	head  int
}

// keepCap is the largest backing array an empty fifo keeps for reuse; a burst's larger one is
// let go so that a connection that was busy once does not hold its memory while idle.
const keepCap = 16

func (q *fifo[T]) len() int { return len(q.items) - q.head }

func (q *fifo[T]) push(v T) {
	if q.head > 0 && len(q.items) == cap(q.items) {
		// Reuse the space of taken items before growing.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, v)
}

func (q *fifo[T]) pop() (T, bool) {
	var zero T
	if q.head == len(q.items) {
		return zero, false
	}
	v := q.items[q.head]
	q.items[q.head] = zero // let the writer's frame be collected once written
	q.head++
	if q.head == len(q.items) {
		if cap(q.items) > keepCap {
			q.items = nil
		} else {
			q.items = q.items[:0]
		}
		q.head = 0
	}
	return v, true
}
