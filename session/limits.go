package session

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits holds the rate limiters each user shares across all that user's sessions on this node,
// so a user who opens more connections does not get more budget, and the budget of log lines
// about cut sessions that all its sessions share. It is safe for concurrent use. A user's entry
// lives while that user has a session, and is freed when the last one ends.
type Limits struct {
	cfg Config
	// cutLog spaces the warn lines of cut sessions. It lives here, not in Config or Metrics,
	// because a Limits is what a node's sessions already share (one per server), so the budget
	// is per process without a global; Config is copied into every session, and Metrics only
	// counts. Sessions without a Limits log every cut, at most one line each.
	cutLog logBudget

	mu    sync.Mutex
	users map[string]*UserLimits // guarded by mu
}

// UserLimits is one user's shared budget, taken with Limits.Acquire and given back with
// Limits.Release.
type UserLimits struct {
	userID string
	refs   int           // sessions holding this budget; guarded by Limits.mu
	sends  *rate.Limiter // nil when sends are unlimited
	frames *rate.Limiter // nil when frames are unlimited
}

// NewLimits returns an empty set of per-user budgets sized by cfg's SendRate, SendBurst,
// UserFrameRate and UserFrameBurst (zero fields take the defaults).
func NewLimits(cfg Config) *Limits {
	return &Limits{cfg: cfg.withDefaults(), cutLog: logBudget{limiter: rate.NewLimiter(cutLogRate, cutLogBurst)}}
}

// Acquire returns userID's shared budget, creating it for the user's first session. Every
// Acquire must be paired with one Release.
func (l *Limits) Acquire(userID string) *UserLimits {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.users[userID]
	if u == nil {
		u = newUserLimits(userID, l.cfg)
		if l.users == nil {
			l.users = make(map[string]*UserLimits)
		}
		l.users[userID] = u
	}
	u.refs++
	return u
}

// Release gives back a budget taken with Acquire; the user's entry is freed with its last session.
func (l *Limits) Release(u *UserLimits) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u.refs--
	if u.refs <= 0 && l.users[u.userID] == u {
		delete(l.users, u.userID)
	}
}

// Users reports how many users currently hold a budget.
func (l *Limits) Users() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.users)
}

func newUserLimits(userID string, cfg Config) *UserLimits {
	return &UserLimits{
		userID: userID,
		sends:  limiter(cfg.SendRate, cfg.SendBurst),
		frames: limiter(cfg.UserFrameRate, cfg.UserFrameBurst),
	}
}

// limiter allows perSecond events with bursts of burst; a negative rate means no limit (nil).
func limiter(perSecond float64, burst int) *rate.Limiter {
	if perSecond < 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(perSecond), burst)
}

// unreachableRetry is the retry hint when a limiter can never allow one event (a zero burst):
// far enough that a client backs off, near enough that a configuration fix is noticed.
const unreachableRetry = time.Second

// take spends one event from each of a and b (nil means unlimited), or from neither. When either
// has no token now, it refuses and reports how long until both would allow one; refusing costs
// nothing, so a refused client is not pushed further behind.
func take(a, b *rate.Limiter) (retryAfter time.Duration, ok bool) {
	now := time.Now()
	ra, wa, okA := reserve(a, now)
	rb, wb, okB := reserve(b, now)
	if okA && okB && wa == 0 && wb == 0 {
		return 0, true
	}
	cancel(ra, now)
	cancel(rb, now)
	switch {
	case !okA || !okB:
		return unreachableRetry, false
	default:
		return max(wa, wb), false
	}
}

func reserve(l *rate.Limiter, now time.Time) (*rate.Reservation, time.Duration, bool) {
	if l == nil {
		return nil, 0, true
	}
	r := l.ReserveN(now, 1)
	if !r.OK() {
		return nil, 0, false
	}
	return r, r.DelayFrom(now), true
}

func cancel(r *rate.Reservation, now time.Time) {
	if r != nil {
		r.CancelAt(now)
	}
}

// Cut sessions are logged at warn, with user, session and remote address, so that an incident
// can be traced; but a network blip or a burst of fan-out can cut thousands of sessions at once,
// and one line each would fill the disk. The sessions sharing a Limits share this budget; the
// line after a gap says how many were suppressed, and chatd_connections_closed_total counts
// every cut by its code.
const (
	cutLogRate  = 5  // lines per second, sustained
	cutLogBurst = 20 // lines at once: enough to name the first users and addresses of an incident
)

// logBudget spaces log lines written by many sessions and counts the lines it held back.
type logBudget struct {
	limiter *rate.Limiter

	mu         sync.Mutex
	suppressed int64 // lines held back since the last one written; guarded by mu
}

// take reports whether a line may be written now and, if so, how many were held back before it.
func (b *logBudget) take() (suppressed int64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.limiter.Allow() {
		b.suppressed++
		return 0, false
	}
	suppressed, b.suppressed = b.suppressed, 0
	return suppressed, true
}

// takeCutLog takes from the shared budget of cut lines; with nil Limits every line may be written.
func (l *Limits) takeCutLog() (suppressed int64, ok bool) {
	if l == nil {
		return 0, true
	}
	return l.cutLog.take()
}
