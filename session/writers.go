package session

import (
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Writers runs the writers of the sessions that share it (Config.Writers), so that one large
// fan-out cannot hold every core. A writer whose session has frames waiting runs on a goroutine
// of its own while fewer than WritersConfig.Direct do; past that it takes its turn on a pool of
// goroutines of which at most WritersConfig.Pooled make progress at once.
//
// Why: a message to a group of 5,000 on one node makes 5,000 writers runnable at once. The Go
// scheduler runs them in the order they became runnable, and while every core is busy it looks
// at the network only every 10 ms, so the reads, store replies and NATS messages of every other
// conversation on the node wait behind the whole fan-out, each of their hops once. With the
// fan-out's writes on fewer goroutines than cores, one core stays free to read the network, and
// a message to another conversation is handled and written while the fan-out goes on.
//
// A pooled writer whose peer stops taking bytes would stall the pool: a worker that has spent
// more than writerStall on one session no longer counts as making progress, and another worker
// starts in its place; the extra one ends once the pool is back to its size.
type Writers struct {
	direct      atomic.Int64 // writers running on goroutines of their own
	directLimit int64
	pooledLimit int

	mu           sync.Mutex
	stallTimeout time.Duration // writerStall; a test may change it
	queue        fifo[turn]
	workers      []*worker // the pool's goroutines, each taking turns until the queue is empty
	watching     bool      // the stall timer is armed; it is while turns wait
	timer        *time.Timer
}

// turn is one session's writes taken by a pooled worker, until its queue is empty.
type turn interface{ writeTurn() }

// worker is one goroutine of the pool.
type worker struct {
	// began is when its turn in progress began (sinceClockStart), 0 between turns.
	began atomic.Int64
}

// WritersConfig sizes Writers. Zero fields take the defaults.
type WritersConfig struct {
	// Direct bounds the writers running on goroutines of their own; default DefaultDirectWriters.
	Direct int
	// Pooled bounds the pool's workers making progress at once; default GOMAXPROCS-1, at least 1.
	Pooled int
}

// writerStall is how long a pooled worker may spend on one session's writes before another
// worker starts beside it. A healthy write of a chat frame takes microseconds; a peer that
// stopped reading holds its write until WriteTimeout. The stall timer ticks at this interval
// while turns wait, so it costs a few hundred timer fires a second on a busy node.
const writerStall = 5 * time.Millisecond

// NewWriters returns Writers for the sessions of one server.
func NewWriters(cfg WritersConfig) *Writers {
	if cfg.Direct <= 0 {
		cfg.Direct = DefaultDirectWriters
	}
	if cfg.Pooled <= 0 {
		cfg.Pooled = max(1, runtime.GOMAXPROCS(0)-1)
	}
	w := &Writers{directLimit: int64(cfg.Direct), pooledLimit: cfg.Pooled, stallTimeout: writerStall}
	w.timer = time.AfterFunc(math.MaxInt64, w.checkStalls) // reset when turns wait
	return w
}

// goDirect reports whether a writer may run on a goroutine of its own, and counts it if so;
// directDone uncounts it. A nil Writers bounds nothing.
func (w *Writers) goDirect() bool {
	if w == nil {
		return true
	}
	if w.direct.Add(1) <= w.directLimit {
		return true
	}
	w.direct.Add(-1)
	return false
}

func (w *Writers) directDone() {
	if w != nil {
		w.direct.Add(-1)
	}
}

// enqueue gives t to the pool.
func (w *Writers) enqueue(t turn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue.push(t)
	if len(w.workers) < w.pooledLimit {
		w.startWorker()
	}
	if !w.watching {
		w.watching = true
		w.timer.Reset(w.stallTimeout)
	}
}

// startWorker starts one more worker; called with mu held.
func (w *Writers) startWorker() {
	me := &worker{}
	w.workers = append(w.workers, me)
	go w.work(me)
}

// work takes turns until the queue is empty, or until the pool has more workers making
// progress than its size (one that stalled has come back).
func (w *Writers) work(me *worker) {
	for {
		w.mu.Lock()
		now := sinceClockStart()
		if w.queue.len() == 0 || w.moving(now) > w.pooledLimit {
			w.retire(me)
			w.mu.Unlock()
			return
		}
		t, _ := w.queue.pop()
		me.began.Store(now)
		w.mu.Unlock()
		t.writeTurn()
		me.began.Store(0)
	}
}

// retire removes me from the workers; called with mu held.
func (w *Writers) retire(me *worker) {
	i := slices.Index(w.workers, me)
	w.workers = slices.Delete(w.workers, i, i+1)
}

// moving counts the workers not stalled in one turn at now; called with mu held.
func (w *Writers) moving(now int64) int {
	n := 0
	for _, o := range w.workers {
		if began := o.began.Load(); began == 0 || time.Duration(now-began) < w.stallTimeout {
			n++
		}
	}
	return n
}

// checkStalls runs on the stall timer while turns wait: it starts workers in place of stalled
// ones, and stops ticking once the queue is empty.
func (w *Writers) checkStalls() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queue.len() == 0 {
		w.watching = false
		return
	}
	for n := w.moving(sinceClockStart()); n < w.pooledLimit; n++ {
		w.startWorker()
	}
	w.timer.Reset(w.stallTimeout)
}
