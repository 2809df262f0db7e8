package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/storage"
)

// BotTokenPrefix starts every bot token, so the server tells it from a JWT without trying both.
const BotTokenPrefix = "chatdbot."

// maxSendBody bounds the JSON body of an HTTP send: a message body of protocol.MaxBodyBytes
// (16 KiB), escaped, and the rest.
const maxSendBody = 3 * protocol.MaxBodyBytes

// maxHTTPSenders bounds the users whose HTTP send budgets a node keeps; past it they start over.
const maxHTTPSenders = 10000

// Bots is what bot tokens need from the store.
type Bots interface {
	IssueBotToken(ctx context.Context, userID, tokenHash string, at time.Time) error
	BotTokenOf(ctx context.Context, tokenHash string) (storage.BotToken, error)
}

// errBotLookup is a bot token that could not be looked up (the store did not answer).
var errBotLookup = errors.New("look up bot token")

// botTokenHash is what a bot token is stored as: its SHA-256, hex.
func botTokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// verify returns the identity of a token: a bot token by its stored hash, anything else as a JWT.
func (s *Server) verify(ctx context.Context, token string) (auth.Identity, error) {
	if !strings.HasPrefix(token, BotTokenPrefix) || s.cfg.Bots == nil {
		return s.auth.Verify(token)
	}
	ctx, cancel := context.WithTimeout(ctx, accountTimeout)
	defer cancel()
	bt, err := s.cfg.Bots.BotTokenOf(ctx, botTokenHash(token))
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return auth.Identity{}, errors.New("unknown or replaced bot token")
	case err != nil:
		return auth.Identity{}, errors.Join(errBotLookup, err)
	}
	return auth.Identity{UserID: bt.UserID, IssuedAt: bt.IssuedAt}, nil
}

// botRoutes adds the admin call that issues bot tokens, and the HTTP send endpoint any user's
// token may use.
func (s *Server) botRoutes(public, admin *http.ServeMux) {
	if s.cfg.Bots == nil {
		return
	}
	if public != nil {
		public.HandleFunc("POST /api/conversations/{id}/messages", s.authed(s.httpSend))
	}
	if admin != nil && len(s.cfg.AdminSecret) > 0 {
		admin.HandleFunc("POST /admin/bots/{id}/token", s.admin(s.issueBotToken))
	}
}

type botTokenResponse struct {
	UserID   string    `json:"userId"`
	Name     string    `json:"name"`
	Token    string    `json:"token"`
	IssuedAt time.Time `json:"issuedAt"`
}

// issueBotToken makes the account of a bot if it has none and gives it a new token, replacing
// the one it had.
func (s *Server) issueBotToken(w http.ResponseWriter, r *http.Request) {
	userID := r.PathValue("id")
	var req struct {
		Name string `json:"name"`
	}
	if !auth.ValidUserID(userID) {
		writeError(w, http.StatusBadRequest, "not a user id")
		return
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, maxLoginBody)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, `body must be empty or JSON: {"name": "Weather Bot"}`)
		return
	}
	name := userID
	if req.Name != "" {
		var err error
		if name, err = protocol.DisplayName(req.Name); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	user, err := s.users.EnsureUser(ctx, storage.User{ID: userID, Name: name, CreatedAt: time.Now().UTC()})
	if errors.Is(err, storage.ErrDeleted) {
		writeError(w, http.StatusConflict, "that account was deleted")
		return
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // crypto/rand never fails
	token := BotTokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	at := time.Now().UTC()
	if err == nil {
		err = s.cfg.Bots.IssueBotToken(ctx, userID, botTokenHash(token), at)
	}
	if err != nil {
		s.log.Error().Err(err).Str("user", userID).Msg("issue bot token")
		writeError(w, http.StatusServiceUnavailable, "could not store the token; try again")
		return
	}
	s.log.Warn().Str("event", "bot_token_issued").Str("user", userID).Str("remote", r.RemoteAddr).Msg("security")
	writeJSON(w, http.StatusCreated, botTokenResponse{UserID: userID, Name: user.Name, Token: token, IssuedAt: at})
}

type sendRequest struct {
	ClientMsgID string `json:"clientMsgId"`
	Body        string `json:"body"`
	ReplyTo     int64  `json:"replyTo"`
}

// httpSend is the send frame over HTTP, for bots and scripts without a socket: the same
// validation, the same idempotency (clientMsgId), the same per-user rate.
func (s *Server) httpSend(w http.ResponseWriter, r *http.Request, userID string) {
	var req sendRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxSendBody)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, `body must be JSON: {"clientMsgId": "...", "body": "..."}`)
		return
	}
	f := protocol.ClientFrame{Type: protocol.TypeSend, ConversationID: r.PathValue("id"), ClientMsgID: req.ClientMsgID, Body: req.Body, ReplyTo: req.ReplyTo}
	if err := f.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, protocol.AsError(err).Message)
		return
	}
	if !s.httpSends.allow(userID, s.cfg.Session) {
		writeError(w, http.StatusTooManyRequests, "too many sends; slow down")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.SendTimeout)
	defer cancel()
	m, err := s.chat.SendWithoutSocket(ctx, userID, chat.SendRequest{ConversationID: f.ConversationID, ClientMsgID: f.ClientMsgID, Body: f.Body, ReplyTo: f.ReplyTo})
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]protocol.Message{"message": m})
	case errors.Is(err, protocol.ErrNotMember):
		writeError(w, http.StatusForbidden, protocol.AsError(err).Message)
	case errors.Is(err, protocol.ErrForbidden):
		writeError(w, http.StatusForbidden, protocol.AsError(err).Message)
	case errors.Is(err, protocol.ErrNotFound), errors.Is(err, protocol.ErrInvalid):
		writeError(w, http.StatusBadRequest, protocol.AsError(err).Message)
	default:
		s.log.Warn().Err(err).Str("user", userID).Msg("http send")
		writeError(w, http.StatusServiceUnavailable, "message not stored; retry with the same clientMsgId")
	}
}

// senderBudgets are the per-user send budgets of HTTP sends on this node (sockets have theirs in
// session.Limits), at the same rate.
type senderBudgets struct {
	mu    sync.Mutex
	users map[string]*rate.Limiter
}

func (b *senderBudgets) allow(userID string, cfg session.Config) bool {
	if cfg.SendRate < 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.users == nil || len(b.users) >= maxHTTPSenders {
		b.users = make(map[string]*rate.Limiter)
	}
	l := b.users[userID]
	if l == nil {
		perSecond, burst := cfg.SendRate, cfg.SendBurst
		if perSecond == 0 {
			perSecond = session.DefaultSendRate
		}
		if burst == 0 {
			burst = session.DefaultSendBurst
		}
		l = rate.NewLimiter(rate.Limit(perSecond), burst)
		b.users[userID] = l
	}
	return l.Allow()
}
