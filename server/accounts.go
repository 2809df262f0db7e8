package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/chatd/chatd/storage"
)

// Account checks, each with its reason.
const (
	// accountCacheTTL is how long a node trusts what it read of an account (does it exist, since
	// when are its tokens valid). A revocation or deletion handled by this node takes effect here
	// at once (it drops the entry); on other nodes it does within this long, while the live
	// sockets everywhere are closed at once by the user event. Short enough that "within
	// seconds" holds, long enough that a burst of HTTP calls costs one store read.
	accountCacheTTL = 2 * time.Second
	// accountCacheMax bounds the cache; past it, expired entries are dropped, and if none has
	// expired, all of them (a flood of distinct users costs store reads, not memory). Expired
	// entries are also swept once a TTL, so the cache holds the accounts read lately, not one
	// per user connected since the node started.
	accountCacheMax = 100_000
	// accountTimeout bounds the store read of one account check.
	accountTimeout = 10 * time.Second
	// subprotocol is the WebSocket subprotocol the server answers; a browser offers it with its
	// token as a second one, tokenSubprotocolPrefix + token (JWTs are base64url and dots, all
	// allowed in a subprotocol name, RFC 6455 section 4.1).
	subprotocol            = "chatd"
	tokenSubprotocolPrefix = "chatd.token."
)

// refusal is why a request is not let in: the HTTP status, the text the client gets and the
// reason it is counted under (chatd_connection_refusals_total).
type refusal struct {
	status int
	msg    string
	reason string
}

func (r *refusal) Error() string { return r.msg }

var (
	errNoToken      = &refusal{http.StatusUnauthorized, "invalid or missing token", reasonToken}
	errNoAccount    = &refusal{http.StatusUnauthorized, "no such account", reasonAccount}
	errRevoked      = &refusal{http.StatusUnauthorized, "token revoked; sign in again", reasonRevoked}
	errAccountStore = &refusal{http.StatusServiceUnavailable, "could not load the account; try again", reasonUnavailable}
)

// requestToken finds the bearer token: the Authorization header, else a WebSocket subprotocol
// (what a browser's WebSocket can send), else the token query parameter (tools, and the page's
// sendBeacon, which can set neither).
func requestToken(r *http.Request) string {
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		return strings.TrimPrefix(h, "Bearer ")
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); strings.HasPrefix(p, tokenSubprotocolPrefix) {
				return strings.TrimPrefix(p, tokenSubprotocolPrefix)
			}
		}
	}
	return r.URL.Query().Get("token")
}

// check lets a request in or says why not: a valid token (auth.Verify), of an account that
// exists and is not deleted (dev mode: made at sign-in; production: made on first use), issued
// after the account's last revocation. Every refusal is logged (rate-limited).
func (s *Server) check(r *http.Request) (string, *refusal) {
	userID, _, refused := s.checkAccount(r)
	return userID, refused
}

// checkAccount is check that also gives the account when it read it from the store (a cache
// miss), so that opening a WebSocket session does not read it again a moment later.
func (s *Server) checkAccount(r *http.Request) (string, *storage.User, *refusal) {
	token := requestToken(r)
	if token == "" {
		s.seclog.refused(eventToken, r, "", "no token")
		return "", nil, errNoToken
	}
	id, err := s.verify(r.Context(), token)
	if errors.Is(err, errBotLookup) {
		s.log.Error().Err(err).Msg("look up bot token")
		return "", nil, errAccountStore
	}
	if err != nil {
		s.seclog.refused(eventToken, r, "", err.Error())
		return "", nil, errNoToken
	}
	user, read, err := s.loadAccount(r.Context(), id.UserID)
	switch {
	case errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrDeleted):
		s.seclog.refused(eventAccount, r, id.UserID, err.Error())
		return "", nil, errNoAccount
	case err != nil:
		s.log.Error().Err(err).Str("user", id.UserID).Msg("load account")
		return "", nil, errAccountStore
	}
	if after := user.TokensValidAfter; after != nil && (id.IssuedAt.IsZero() || id.IssuedAt.Before(*after)) {
		s.seclog.refused(eventAccount, r, id.UserID, fmt.Sprintf("token issued before the revocation of %s", after.UTC().Format(time.RFC3339)))
		return "", nil, errRevoked
	}
	if !read {
		return id.UserID, nil, nil
	}
	return id.UserID, &user, nil
}

// account reads the user's account, through the cache. Dev-mode accounts exist from sign-in on;
// in production the identity provider vouches for the user, whose account is made on first use.
func (s *Server) account(ctx context.Context, userID string) (storage.User, error) {
	u, _, err := s.loadAccount(ctx, userID)
	return u, err
}

// loadAccount is account that also says whether it read the store (the cache did not have it).
func (s *Server) loadAccount(ctx context.Context, userID string) (_ storage.User, read bool, _ error) {
	u, gen, ok := s.accounts.get(userID)
	if ok {
		return u, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, accountTimeout)
	defer cancel()
	var err error
	if s.auth.DevMode() {
		u, err = s.users.User(ctx, userID)
	} else {
		u, err = s.users.EnsureUser(ctx, storage.User{ID: userID, Name: userID, CreatedAt: time.Now().UTC()})
	}
	if err != nil {
		return storage.User{}, false, err
	}
	s.accounts.put(u, gen)
	return u, true, nil
}

// accountCache keeps accounts read in the last accountCacheTTL.
type accountCache struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]cachedAccount
	// gen counts forgets: a read that began before one is not cached, so a revocation is not
	// undone by a lookup that was in flight when it happened.
	gen   uint64
	swept time.Time // when expired entries were last dropped
}

type cachedAccount struct {
	user    storage.User
	expires time.Time
}

func newAccountCache() *accountCache {
	return &accountCache{now: time.Now, m: make(map[string]cachedAccount)}
}

// get returns the cached account, or the generation to hand to put after reading it.
func (c *accountCache) get(id string) (storage.User, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok || !c.now().Before(e.expires) {
		return storage.User{}, c.gen, false
	}
	return e.user, c.gen, true
}

// put caches an account read since get returned gen, unless a forget came in between.
func (c *accountCache) put(u storage.User, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	now := c.now()
	if len(c.m) >= accountCacheMax || now.Sub(c.swept) >= accountCacheTTL {
		c.swept = now
		for id, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, id)
			}
		}
		if len(c.m) >= accountCacheMax {
			clear(c.m)
		}
	}
	c.m[u.ID] = cachedAccount{user: u, expires: now.Add(accountCacheTTL)}
}

// forget drops what the cache knows of a user: their account changed on this node.
func (c *accountCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.m, id)
}
