package session

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// lifetime is a session's context: done when the session closes, with no deadline and no
// values. It is a type of its own rather than a context.WithCancel because a cancelCtx allocates
// a map of its children when the first one is derived (the first frame's handler timeout) and
// keeps it, emptied, for as long as it lives, on every idle socket (docs/BENCHMARKS.md, "Memory
// per idle connection"). Children derived
// from a lifetime register through AfterFunc (the context package looks for that method), and
// the registry lets go of its map whenever it empties.
type lifetime struct {
	done chan struct{} // closed by end
	// ended is set by end just before done closes, as a cancelCtx sets its error. Err reads it
	// rather than polling done: the writer asks before every frame, and a load of a word the
	// session already has in cache is cheaper than a receive from a channel it has not.
	ended atomic.Bool

	mu    sync.Mutex           // orders AfterFunc against end
	funcs map[*func()]struct{} // called by end; nil when empty
}

func (l *lifetime) Deadline() (time.Time, bool) { return time.Time{}, false }

func (l *lifetime) Done() <-chan struct{} { return l.done }

func (l *lifetime) Err() error {
	if l.ended.Load() {
		return context.Canceled
	}
	return nil
}

func (l *lifetime) Value(any) any { return nil }

// AfterFunc arranges for f to be called once the lifetime ends, or at once on a goroutine of its
// own when it already has; stop undoes that and reports whether it did. The context package calls
// it for every context derived from a lifetime, with an f that only cancels the child.
func (l *lifetime) AfterFunc(f func()) (stop func() bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended.Load() {
		go f()
		return func() bool { return false }
	}
	key := &f
	if l.funcs == nil {
		l.funcs = make(map[*func()]struct{})
	}
	l.funcs[key] = struct{}{}
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, ok := l.funcs[key]; !ok {
			return false
		}
		delete(l.funcs, key)
		if len(l.funcs) == 0 {
			l.funcs = nil
		}
		return true
	}
}

// end closes Done and calls the registered funcs; it must be called once. They are called on
// this goroutine: the context package registers only funcs that cancel a child or start a
// goroutine of their own.
func (l *lifetime) end() {
	l.mu.Lock()
	l.ended.Store(true)
	funcs := l.funcs
	l.funcs = nil
	close(l.done)
	l.mu.Unlock()
	for f := range funcs {
		(*f)()
	}
}
