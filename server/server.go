// Package server is a node's HTTP surface: the WebSocket endpoint, the small JSON API (dev-mode
// sign-in, badge), health and readiness checks, and the bundled demo page. It authenticates every
// request before anything else happens, so a bad token never gets a socket.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/attach"
	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/storage"
	"github.com/chatd/chatd/web"
)

// maxLoginBody bounds the JSON body of a sign-in or read request.
const maxLoginBody = 4 << 10

// Users is what sign-in, the account checks and revocation need from the store.
type Users interface {
	EnsureUser(ctx context.Context, u storage.User) (storage.User, error)
	User(ctx context.Context, id string) (storage.User, error)
	ReviveUser(ctx context.Context, u storage.User) (storage.User, error)
	RevokeTokens(ctx context.Context, userID string, at time.Time) (time.Time, error)
}

// Config tunes the HTTP surface.
type Config struct {
	// AllowedOrigins are host patterns (path.Match) of pages allowed to open WebSockets from
	// another origin; the server's own host is always allowed.
	AllowedOrigins []string
	// Session tunes every WebSocket session.
	Session session.Config
	// SendTimeout and OpTimeout bound the work of one send frame and of any other frame; zero
	// means chat.DefaultSendTimeout and chat.DefaultOpTimeout.
	SendTimeout, OpTimeout time.Duration
	// Ready, if set, is asked by /readyz whether the node's dependencies answer. /readyz shows
	// the reason of a NotReady error and logs the rest; any other error shows as "not ready".
	Ready func(ctx context.Context) error
	// AdminSecret protects the admin API under /admin/ (see admin.go); empty turns it off (404).
	AdminSecret []byte
	// NodeID and Owned describe the node on /debug/partitions.
	NodeID string
	Owned  func() []int
	// Metrics, if set, counts refused connections; nil records nothing.
	Metrics *Metrics
	// Gatherer, if set, is what the admin listener's /metrics exposes; nil means no /metrics.
	Gatherer prometheus.Gatherer
	// Push, if set, serves the Web Push endpoints under /api/push/ (push.go).
	Push Push
	// Webhooks, if set, serves the webhook endpoints (webhooks.go).
	Webhooks Webhooks
	// Bots, if set, accepts bot tokens and serves their issuing and the HTTP send (bots.go).
	Bots Bots
	// Files, if set, serves attachments (files.go); nil answers their endpoints 404.
	Files *attach.Service
}

// Server serves one node's HTTP and WebSocket traffic.
type Server struct {
	cfg    Config
	auth   *auth.Authenticator
	chat   *chat.Service
	router *router
	limits *session.Limits
	users  Users
	log    zerolog.Logger
	// seclog writes refusals, rate-limited per kind; accounts caches account checks briefly.
	seclog   *securityLog
	accounts *accountCache
	// httpSends are the send budgets of POST /api/conversations/{id}/messages.
	httpSends senderBudgets

	sessions     sync.WaitGroup
	sessionCtx   context.Context
	stopSessions context.CancelFunc
	draining     atomic.Bool
}

// New returns a server.
func New(cfg Config, a *auth.Authenticator, service *chat.Service, users Users, log zerolog.Logger) (*Server, error) {
	if err := cfg.Session.Validate(); err != nil {
		return nil, err
	}
	if cfg.SendTimeout == 0 {
		cfg.SendTimeout = chat.DefaultSendTimeout
	}
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = chat.DefaultOpTimeout
	}
	if cfg.Session.Writers == nil {
		cfg.Session.Writers = session.NewWriters(session.WritersConfig{})
	}
	if len(cfg.AdminSecret) > 0 && len(cfg.AdminSecret) < auth.MinSecretBytes {
		return nil, fmt.Errorf("server: the admin secret must be at least %d bytes", auth.MinSecretBytes)
	}
	log = log.With().Str("component", "server").Logger()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, auth: a, chat: service, users: users, log: log,
		seclog: newSecurityLog(log), accounts: newAccountCache(),
		limits: session.NewLimits(cfg.Session), sessionCtx: ctx, stopSessions: cancel}
	s.router = &router{chat: service, account: s.account, forgetAccount: s.accounts.forget,
		sendTimeout: cfg.SendTimeout, opTimeout: cfg.OpTimeout, metrics: cfg.Metrics, log: log}
	return s, nil
}

// Handler routes the public endpoints: the WebSocket, the JSON API, the health checks and the
// page. Operators' endpoints (metrics, debug, admin API) are only on AdminHandler; here they are
// 404, so a reverse proxy that forwards everything still exposes none of them.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", s.serveWebSocket)
	mux.HandleFunc("POST /api/login", s.login)
	mux.HandleFunc("GET /api/badge", s.authed(s.badge))
	mux.HandleFunc("DELETE /api/account", s.authed(s.deleteAccount))
	mux.HandleFunc("POST /api/read", s.authed(s.read))
	s.pushRoutes(mux)
	s.webhookRoutes(mux, nil)
	s.botRoutes(mux, nil)
	s.fileRoutes(mux)
	s.healthRoutes(mux)
	// The JSON 404, not the page's 404 of "GET /".
	for _, route := range []string{"GET /metrics", "GET /debug/", "GET /admin/", "POST /admin/"} {
		mux.HandleFunc(route, notFound)
	}
	mux.Handle("GET /", web.Handler())
	return mux
}

// AdminHandler routes the operators' endpoints, served on the node's admin listener (loopback by
// default): /metrics, the health checks, /debug/partitions, /debug/pprof/ and the admin API.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	if s.cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{ErrorLog: promLog{s.log}}))
	}
	s.healthRoutes(mux)
	mux.HandleFunc("GET /debug/partitions", s.partitions)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	s.adminRoutes(mux)
	s.webhookRoutes(nil, mux)
	s.botRoutes(nil, mux)
	mux.HandleFunc("/", notFound)
	return mux
}

// healthRoutes adds /healthz and /readyz, on both listeners: probes of a load balancer reach the
// public port, and they say nothing beyond "ready" or which dependency is missing.
func (s *Server) healthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok") })
	mux.HandleFunc("GET /readyz", s.readyz)
}

func notFound(w http.ResponseWriter, _ *http.Request) {
	writeError(w, http.StatusNotFound, "not found")
}

// promLog sends the metrics handler's errors to the node's log.
type promLog struct{ log zerolog.Logger }

func (l promLog) Println(v ...any) { l.log.Error().Msg(fmt.Sprint(v...)) }

// CloseSessions tells every session to close with a going-away code (so clients reconnect to
// another node) and waits until they have, or until ctx ends.
func (s *Server) CloseSessions(ctx context.Context) error {
	s.draining.Store(true)
	s.stopSessions()
	done := make(chan struct{})
	go func() {
		s.sessions.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close sessions: %w", ctx.Err())
	}
}

// authed runs h for requests that pass the account check (see check): a valid token of an
// account that exists and was not revoked since the token was issued. Every endpoint refuses the
// same token the same way.
func (s *Server) authed(h func(w http.ResponseWriter, r *http.Request, userID string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		userID, refused := s.check(r)
		if refused != nil {
			writeError(w, refused.status, refused.msg)
			return
		}
		h(w, r, userID)
	}
}

func (s *Server) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		s.cfg.Metrics.refused(reasonDraining)
		writeError(w, http.StatusServiceUnavailable, "node is shutting down")
		return
	}
	// The Origin first: a hostile page holding a stolen token gets nothing loaded (or, in
	// production, created) before its 403.
	if err := checkOrigin(r, s.cfg.AllowedOrigins); err != nil {
		s.seclog.refused(eventOrigin, r, "", err.Error())
		s.cfg.Metrics.refused(reasonOrigin)
		writeError(w, http.StatusForbidden, "origin not allowed")
		return
	}
	userID, account, refused := s.checkAccount(r)
	if refused != nil {
		s.cfg.Metrics.refused(refused.reason)
		writeError(w, refused.status, refused.msg)
		return
	}
	conn, err := session.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.cfg.AllowedOrigins,
		Subprotocols: []string{subprotocol}})
	if err != nil {
		// Accept has already answered the request (400 for a bad upgrade).
		s.seclog.refused(eventUpgrade, r, userID, err.Error())
		s.cfg.Metrics.refused(reasonUpgrade)
		return
	}
	// The session logs its refusals and cuts; with the remote address they can be traced.
	sess := session.New(conn, userID, session.Peer{Addr: r.RemoteAddr, ForwardedFor: r.Header.Get("X-Forwarded-For")},
		s.cfg.Session, s.limits, s.log)
	// The session runs on a goroutine of its own and this handler returns: the connection is
	// hijacked, so net/http lets go of the request, its response buffer and the handler's deep
	// stack, which an idle socket would otherwise keep for its whole life (docs/BENCHMARKS.md,
	// "Memory per idle connection"). Shutdown waits for the session through s.sessions. A panic
	// is recovered and logged, as net/http did while the session ran in its handler.
	s.sessions.Add(1)
	go func() {
		defer s.sessions.Done()
		defer func() {
			if p := recover(); p != nil {
				s.log.Error().Interface("panic", p).Str("user", userID).Bytes("stack", debug.Stack()).Msg("session panicked")
				_ = conn.CloseNow()
			}
		}()
		if err := sess.Serve(s.sessionCtx, &opening{router: s.router, account: account}); err != nil {
			s.log.Warn().Err(err).Str("user", userID).Msg("session ended")
		}
	}()
}

type loginRequest struct {
	Name string `json:"name"`
}

type loginResponse struct {
	Token  string `json:"token"`
	UserID string `json:"userId"`
	Name   string `json:"name"`
}

// login is dev mode's sign-in: a display name becomes a user and gets a token.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !s.auth.DevMode() {
		writeError(w, http.StatusNotFound, "sign-in is done by the identity provider")
		return
	}
	var req loginRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxLoginBody)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "body must be JSON: {\"name\": \"...\"}")
		return
	}
	id, name, err := auth.UserIDFromName(req.Name)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.OpTimeout)
	defer cancel()
	fresh := storage.User{ID: id, Name: name, CreatedAt: time.Now().UTC()}
	_, gen, _ := s.accounts.get(id)
	user, err := s.users.EnsureUser(ctx, fresh)
	if errors.Is(err, storage.ErrDeleted) {
		// Dev mode lets anyone take any name, a deleted one too: a new account, under which
		// the deleted account's tokens stay refused.
		user, err = s.users.ReviveUser(ctx, fresh)
		s.accounts.forget(id)
	}
	if err != nil {
		s.log.Error().Err(err).Msg("sign in")
		writeError(w, http.StatusServiceUnavailable, "could not sign in; try again")
		return
	}
	// The connect that follows a sign-in checks the account: it finds it here, not in the store.
	s.accounts.put(user, gen)
	var validAfter time.Time
	if user.TokensValidAfter != nil {
		validAfter = *user.TokensValidAfter
	}
	token, err := s.auth.IssueAfter(user.ID, validAfter)
	if err != nil {
		s.log.Error().Err(err).Msg("issue token")
		writeError(w, http.StatusInternalServerError, "could not issue a token")
		return
	}
	writeJSON(w, http.StatusOK, loginResponse{Token: token, UserID: user.ID, Name: user.Name})
}

type badgeResponse struct {
	UserID string `json:"userId"`
	Total  int64  `json:"total"`
	// Mentions counts the unread messages of Total that mention the user.
	Mentions int64 `json:"mentions"`
}

// badge returns the caller's total unread, for push services acting for offline users.
func (s *Server) badge(w http.ResponseWriter, r *http.Request, userID string) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.OpTimeout)
	defer cancel()
	counts, err := s.chat.Badge(ctx, userID)
	if err != nil {
		s.log.Error().Err(err).Msg("badge")
		writeError(w, http.StatusServiceUnavailable, "could not compute the badge; try again")
		return
	}
	writeJSON(w, http.StatusOK, badgeResponse{UserID: userID, Total: counts.Unread, Mentions: counts.Mentions})
}

type readRequest struct {
	ConversationID string `json:"conversationId"`
	Seq            int64  `json:"seq"`
}

// read moves the caller's read cursor, like a read frame. A page that is closing sends its last
// read this way (navigator.sendBeacon), since frames queued during unload are often dropped.
func (s *Server) read(w http.ResponseWriter, r *http.Request, userID string) {
	var req readRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxLoginBody)).Decode(&req); err != nil ||
		!protocol.ValidID(req.ConversationID) || req.Seq < 1 {
		writeError(w, http.StatusBadRequest, "body must be JSON: {\"conversationId\": \"...\", \"seq\": 1}")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.OpTimeout)
	defer cancel()
	err := s.chat.Read(ctx, userID, req.ConversationID, req.Seq)
	switch {
	case errors.Is(err, protocol.ErrNotMember):
		writeError(w, http.StatusForbidden, protocol.AsError(err).Message)
	case err != nil:
		s.log.Error().Err(err).Str("user", userID).Msg("read")
		writeError(w, http.StatusServiceUnavailable, "could not record the read; try again")
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// deleteAccount removes the caller's account and everything of theirs; see chat.DeleteAccount.
func (s *Server) deleteAccount(w http.ResponseWriter, r *http.Request, userID string) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	err := s.chat.DeleteAccount(ctx, userID)
	s.accounts.forget(userID) // its tokens are refused here at once, elsewhere within accountCacheTTL
	if err != nil {
		s.log.Error().Err(err).Str("user", userID).Msg("delete account")
		writeError(w, http.StatusServiceUnavailable, "could not finish deleting the account; try again (it is safe to repeat)")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeText(w, http.StatusServiceUnavailable, "draining")
		return
	}
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			// The reason in words for the prober; the error, which may name hosts, ports and
			// driver internals, only in the log.
			reason := "not ready"
			var nr *NotReadyError
			if errors.As(err, &nr) {
				reason = "not ready: " + nr.Reason
			}
			s.seclog.refused(eventReady, r, "", err.Error())
			writeText(w, http.StatusServiceUnavailable, reason)
			return
		}
	}
	writeText(w, http.StatusOK, "ready")
}

// NotReadyError says which dependency a node is waiting for, in words fit for a public answer
// ("store not reachable"); Err holds the details, for the log.
type NotReadyError struct {
	Reason string
	Err    error
}

// NotReady returns a NotReadyError.
func NotReady(reason string, err error) error { return &NotReadyError{Reason: reason, Err: err} }

func (e *NotReadyError) Error() string {
	if e.Err == nil {
		return e.Reason
	}
	return e.Reason + ": " + e.Err.Error()
}

func (e *NotReadyError) Unwrap() error { return e.Err }

type partitionsResponse struct {
	Node  string `json:"node"`
	Owned []int  `json:"owned"`
}

// partitions says which sequencer partitions this node owns right now, for operators and tests.
func (s *Server) partitions(w http.ResponseWriter, _ *http.Request) {
	owned := []int{}
	if s.cfg.Owned != nil {
		owned = s.cfg.Owned()
	}
	slices.Sort(owned)
	writeJSON(w, http.StatusOK, partitionsResponse{Node: s.cfg.NodeID, Owned: owned})
}

type errorResponse struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorResponse{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a failed write means the client went away
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg+"\n") // a failed write means the client went away
}
