package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/push"
)

// maxPushBody bounds the JSON body of a push subscription (under 2.5 KB) or of push settings; a
// settings body of earlier versions, with up to a thousand muted conversation ids (ignored now),
// still fits.
const maxPushBody = 80 << 10

// Push is what the Web Push endpoints need; push.Notifier implements it.
type Push interface {
	PublicKey() string
	Subscribe(ctx context.Context, userID, device string, sub push.Subscription) error
	Unsubscribe(ctx context.Context, userID, device string) error
	Settings(ctx context.Context, userID string) (push.Settings, error)
	SetSettings(ctx context.Context, userID string, set push.Settings) error
}

// pushRoutes adds the Web Push endpoints (docs/PROTOCOL.md, "Web Push"); without a Push they are
// 404 like any unknown path.
func (s *Server) pushRoutes(mux *http.ServeMux) {
	if s.cfg.Push == nil {
		return
	}
	mux.HandleFunc("GET /api/push/key", s.authed(func(w http.ResponseWriter, _ *http.Request, _ string) {
		writeJSON(w, http.StatusOK, map[string]string{"publicKey": s.cfg.Push.PublicKey()})
	}))
	mux.HandleFunc("PUT /api/push/subscriptions/{device}", s.authed(func(w http.ResponseWriter, r *http.Request, userID string) {
		var sub push.Subscription
		if !decodePushBody(w, r, &sub) {
			return
		}
		s.pushAnswer(w, r, userID, "store the subscription", func(ctx context.Context) error {
			return s.cfg.Push.Subscribe(ctx, userID, r.PathValue("device"), sub)
		})
	}))
	mux.HandleFunc("DELETE /api/push/subscriptions/{device}", s.authed(func(w http.ResponseWriter, r *http.Request, userID string) {
		s.pushAnswer(w, r, userID, "remove the subscription", func(ctx context.Context) error {
			return s.cfg.Push.Unsubscribe(ctx, userID, r.PathValue("device"))
		})
	}))
	mux.HandleFunc("GET /api/push/settings", s.authed(func(w http.ResponseWriter, r *http.Request, userID string) {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.OpTimeout)
		defer cancel()
		set, err := s.cfg.Push.Settings(ctx, userID)
		if err != nil {
			s.log.Error().Err(err).Str("user", userID).Msg("read push settings")
			writeError(w, http.StatusServiceUnavailable, "could not read the settings; try again")
			return
		}
		writeJSON(w, http.StatusOK, set)
	}))
	mux.HandleFunc("PUT /api/push/settings", s.authed(func(w http.ResponseWriter, r *http.Request, userID string) {
		var set push.Settings
		if !decodePushBody(w, r, &set) {
			return
		}
		s.pushAnswer(w, r, userID, "store the settings", func(ctx context.Context) error {
			return s.cfg.Push.SetSettings(ctx, userID, set)
		})
	}))
}

// decodePushBody decodes a JSON body into v, or answers 400 and returns false.
func decodePushBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, maxPushBody)).Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "body must be JSON as documented")
		return false
	}
	return true
}

// pushAnswer runs op and answers 204, 400 (invalid), 409 (a limit) or 503.
func (s *Server) pushAnswer(w http.ResponseWriter, r *http.Request, userID, what string, op func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.OpTimeout)
	defer cancel()
	err := op(ctx)
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, protocol.ErrInvalid):
		writeError(w, http.StatusBadRequest, protocol.AsError(err).Message)
	case errors.Is(err, protocol.ErrLimit):
		writeError(w, http.StatusConflict, protocol.AsError(err).Message)
	default:
		s.log.Error().Err(err).Str("user", userID).Msg(what)
		writeError(w, http.StatusServiceUnavailable, "could not "+what+"; try again")
	}
}
