package attach

import (
	"sync"
	"time"
)

// limitWindow is the span of the per-user upload limits.
const limitWindow = time.Hour

// maxLimitEntries bounds the users the limits remember; past it, users whose hour is over go.
const maxLimitEntries = 100_000

// hourlyLimits bounds each user's uploads and bytes per hour on this node: a fixed window that
// starts with the user's first upload in it. An upload reserves its declared size (the file limit
// when unknown) and settles for what it stored, so concurrent uploads cannot pass the limit.
type hourlyLimits struct {
	uploads int
	bytes   int64

	mu    sync.Mutex
	users map[string]*userWindow
}

type userWindow struct {
	start   time.Time
	uploads int
	bytes   int64
}

func newHourlyLimits(uploads int, bytes int64) *hourlyLimits {
	return &hourlyLimits{uploads: uploads, bytes: bytes, users: make(map[string]*userWindow)}
}

// reserve takes one upload of size bytes from the user's hour, or refuses with a
// *RateLimitedError. settle gives back what the upload did not store (all of it if it failed);
// the upload itself stays counted.
func (h *hourlyLimits) reserve(userID string, size int64, now time.Time) (settle func(stored int64), err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.users[userID]
	if w == nil || now.Sub(w.start) >= limitWindow {
		if len(h.users) >= maxLimitEntries {
			for id, o := range h.users {
				if now.Sub(o.start) >= limitWindow {
					delete(h.users, id)
				}
			}
		}
		w = &userWindow{start: now}
		h.users[userID] = w
	}
	retry := w.start.Add(limitWindow).Sub(now)
	switch {
	case w.uploads >= h.uploads:
		return nil, &RateLimitedError{RetryAfter: retry, What: "uploads"}
	case w.bytes+size > h.bytes:
		return nil, &RateLimitedError{RetryAfter: retry, What: "bytes uploaded"}
	}
	w.uploads++
	w.bytes += size
	return func(stored int64) {
		h.mu.Lock()
		defer h.mu.Unlock()
		w.bytes -= size - stored
	}, nil
}
