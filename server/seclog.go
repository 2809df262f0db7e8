package server

import (
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/time/rate"
)

// securityLogPerSecond is how many lines a second each kind of refusal may write (and the burst):
// enough to see an attack start, from where and against whom, too few for a flood of bad tokens
// to fill the disk or drown the other logs. The lines dropped meanwhile are counted in the next
// line of that kind ("suppressed").
const securityLogPerSecond = 5

// Kinds of security event; each is rate-limited on its own, so a flood of one kind does not hide
// another.
const (
	eventToken   = "token refused"   // a missing, forged, expired or malformed token
	eventAccount = "account refused" // a valid token of a deleted, unknown or revoked account
	eventOrigin  = "origin refused"  // a browser page of a foreign origin opening a WebSocket
	eventUpgrade = "upgrade refused" // a WebSocket handshake that was not one
	eventAdmin   = "admin refused"   // an admin call without the admin secret
	eventReady   = "not ready"       // /readyz answered 503; the details only go here
)

// securityLog writes refusals at warn, each kind at most securityLogPerSecond lines a second,
// with the remote address and never a token or secret.
type securityLog struct {
	log zerolog.Logger
	now func() time.Time

	mu    sync.Mutex
	kinds map[string]*sampledKind
}

type sampledKind struct {
	limiter    *rate.Limiter
	suppressed int
}

func newSecurityLog(log zerolog.Logger) *securityLog {
	return &securityLog{log: log, now: time.Now, kinds: make(map[string]*sampledKind)}
}

// refused logs one event of kind for request r, with reason (an error text that never holds a
// token) and the user when it is known.
func (l *securityLog) refused(kind string, r *http.Request, userID, reason string) {
	l.mu.Lock()
	k := l.kinds[kind]
	if k == nil {
		k = &sampledKind{limiter: rate.NewLimiter(securityLogPerSecond, securityLogPerSecond)}
		l.kinds[kind] = k
	}
	if !k.limiter.AllowN(l.now(), 1) {
		k.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := k.suppressed
	k.suppressed = 0
	l.mu.Unlock()

	ev := l.log.Warn().Str("event", kind).Str("reason", reason).Str("remote", r.RemoteAddr).
		Str("method", r.Method).Str("path", r.URL.Path)
	if fwd := r.Header.Get("X-Forwarded-For"); fwd != "" {
		ev = ev.Str("forwardedFor", fwd) // set by the load balancer; as trustworthy as it is
	}
	if userID != "" {
		ev = ev.Str("user", userID)
	}
	if suppressed > 0 {
		ev = ev.Int("suppressed", suppressed)
	}
	ev.Msg("security")
}
