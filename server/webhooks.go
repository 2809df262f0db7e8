package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// maxWebhooks bounds the webhooks of one conversation: each costs a goroutine and a POST per event
// on the conversation's owner.
const maxWebhooks = 5

// Webhooks is what registering outgoing webhooks needs from the store.
type Webhooks interface {
	Conversation(ctx context.Context, id string) (storage.Conversation, error)
	WebhooksOf(ctx context.Context, conversationID string) ([]storage.Webhook, error)
	SetWebhooks(ctx context.Context, conversationID string, hooks []storage.Webhook) error
	SaveWebhookCursor(ctx context.Context, conversationID, webhookID string, cur storage.WebhookCursor) error
}

// webhookView is a webhook as the API shows it; the secret only in the answer that made it.
type webhookView struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	Secret    string    `json:"secret,omitempty"`
	CreatedBy string    `json:"createdBy"`
	CreatedAt time.Time `json:"createdAt"`
}

// webhookRoutes adds the webhook endpoints: on the admin API for operators (any http or https
// URL), and on the public API for a group's creator (https only: a user must not make the node
// POST into its own network).
func (s *Server) webhookRoutes(public, admin *http.ServeMux) {
	if s.cfg.Webhooks == nil {
		return
	}
	if public != nil {
		public.HandleFunc("GET /api/conversations/{id}/webhooks", s.authed(func(w http.ResponseWriter, r *http.Request, userID string) {
			s.listWebhooks(w, r, userID)
		}))
		public.HandleFunc("POST /api/conversations/{id}/webhooks", s.authed(func(w http.ResponseWriter, r *http.Request, userID string) {
			s.addWebhook(w, r, userID)
		}))
		public.HandleFunc("DELETE /api/conversations/{id}/webhooks/{hook}", s.authed(func(w http.ResponseWriter, r *http.Request, userID string) {
			s.removeWebhook(w, r, userID)
		}))
	}
	if admin != nil && len(s.cfg.AdminSecret) > 0 {
		admin.HandleFunc("GET /admin/conversations/{id}/webhooks", s.admin(func(w http.ResponseWriter, r *http.Request) { s.listWebhooks(w, r, "") }))
		admin.HandleFunc("POST /admin/conversations/{id}/webhooks", s.admin(func(w http.ResponseWriter, r *http.Request) { s.addWebhook(w, r, "") }))
		admin.HandleFunc("DELETE /admin/conversations/{id}/webhooks/{hook}", s.admin(func(w http.ResponseWriter, r *http.Request) { s.removeWebhook(w, r, "") }))
	}
}

// webhookConversation reads the conversation of the request and checks that userID ("" for the
// operator) may manage its webhooks; it answers and returns false otherwise.
func (s *Server) webhookConversation(ctx context.Context, w http.ResponseWriter, r *http.Request, userID string) ([]storage.Webhook, storage.Conversation, bool) {
	id := r.PathValue("id")
	conv, err := s.cfg.Webhooks.Conversation(ctx, id)
	switch {
	case errors.Is(err, storage.ErrNotFound) || (err == nil && userID != "" && !conv.IsMember(userID)):
		writeError(w, http.StatusNotFound, "no such conversation")
		return nil, conv, false
	case err != nil:
		s.log.Error().Err(err).Str("conversation", id).Msg("read conversation for webhooks")
		writeError(w, http.StatusServiceUnavailable, "could not read the conversation; try again")
		return nil, conv, false
	case userID != "" && (conv.Kind != protocol.ConversationGroup || conv.CreatedBy != userID):
		writeError(w, http.StatusForbidden, "only the group's owner manages its webhooks")
		return nil, conv, false
	}
	hooks, err := s.cfg.Webhooks.WebhooksOf(ctx, id)
	if err != nil {
		s.log.Error().Err(err).Str("conversation", id).Msg("read webhooks")
		writeError(w, http.StatusServiceUnavailable, "could not read the webhooks; try again")
		return nil, conv, false
	}
	return hooks, conv, true
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request, userID string) {
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	hooks, _, ok := s.webhookConversation(ctx, w, r, userID)
	if !ok {
		return
	}
	views := make([]webhookView, len(hooks))
	for i, h := range hooks {
		views[i] = webhookView{ID: h.ID, URL: h.URL, CreatedBy: h.CreatedBy, CreatedAt: h.CreatedAt}
	}
	writeJSON(w, http.StatusOK, map[string]any{"webhooks": views})
}

func (s *Server) addWebhook(w http.ResponseWriter, r *http.Request, userID string) {
	var req struct {
		URL string `json:"url"`
	}
	err := json.NewDecoder(io.LimitReader(r.Body, maxLoginBody)).Decode(&req)
	u, perr := url.Parse(req.URL)
	if err != nil || perr != nil || u.Host == "" || len(req.URL) > 2048 ||
		!(u.Scheme == "https" || (userID == "" && u.Scheme == "http")) {
		writeError(w, http.StatusBadRequest, `body must be JSON: {"url": "https://..."}`)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	hooks, conv, ok := s.webhookConversation(ctx, w, r, userID)
	if !ok {
		return
	}
	if len(hooks) >= maxWebhooks {
		writeError(w, http.StatusConflict, "a conversation has at most 5 webhooks")
		return
	}
	h := storage.Webhook{ID: randomHex(8), URL: req.URL, Secret: randomHex(32), CreatedBy: userID, CreatedAt: time.Now().UTC()}
	if h.CreatedBy == "" {
		h.CreatedBy = "admin"
	}
	// The webhook starts with the conversation as it is now: the events after it, not its history.
	start := storage.WebhookCursor{Seq: conv.LastSeq, Version: conv.LastVersion}
	if err := s.cfg.Webhooks.SaveWebhookCursor(ctx, conv.ID, h.ID, start); err != nil {
		s.log.Error().Err(err).Msg("store webhook cursor")
		writeError(w, http.StatusServiceUnavailable, "could not store the webhook; try again")
		return
	}
	if err := s.cfg.Webhooks.SetWebhooks(ctx, conv.ID, append(hooks, h)); err != nil {
		s.log.Error().Err(err).Msg("store webhook")
		writeError(w, http.StatusServiceUnavailable, "could not store the webhook; try again")
		return
	}
	writeJSON(w, http.StatusCreated, webhookView(h))
}

func (s *Server) removeWebhook(w http.ResponseWriter, r *http.Request, userID string) {
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	hooks, _, ok := s.webhookConversation(ctx, w, r, userID)
	if !ok {
		return
	}
	kept := slices.DeleteFunc(hooks, func(h storage.Webhook) bool { return h.ID == r.PathValue("hook") })
	if err := s.cfg.Webhooks.SetWebhooks(ctx, r.PathValue("id"), kept); err != nil {
		s.log.Error().Err(err).Msg("remove webhook")
		writeError(w, http.StatusServiceUnavailable, "could not remove the webhook; try again")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand never fails
	return hex.EncodeToString(b)
}
