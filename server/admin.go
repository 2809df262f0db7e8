package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/protocol"
)

// adminTimeout bounds one admin call's store write and publish.
const adminTimeout = 10 * time.Second

// adminRoutes adds the operators' API under /admin/, on the admin listener and behind its own
// secret. Without a secret the API does not exist: every /admin/ path is 404.
func (s *Server) adminRoutes(mux *http.ServeMux) {
	if len(s.cfg.AdminSecret) == 0 {
		return
	}
	mux.HandleFunc("POST /admin/users/{id}/revoke", s.admin(s.revoke))
	mux.HandleFunc("GET /admin/conversations/{id}/reports", s.admin(s.reports))
}

// admin runs h for requests that carry the admin secret as a bearer token.
func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	// Compared as hashes in constant time: neither the secret's bytes nor its length leak
	// through timing.
	want := sha256.Sum256(s.cfg.AdminSecret)
	return func(w http.ResponseWriter, r *http.Request) {
		given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got := sha256.Sum256([]byte(given))
		if !ok || subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
			s.seclog.refused(eventAdmin, r, "", "missing or wrong admin secret")
			writeError(w, http.StatusUnauthorized, "admin secret required")
			return
		}
		h(w, r)
	}
}

type revokeResponse struct {
	UserID           string    `json:"userId"`
	TokensValidAfter time.Time `json:"tokensValidAfter"`
}

// revoke refuses every token of a user issued until now (see storage.RevokeTokens) and closes
// their sockets on every node with 4003.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	userID := r.PathValue("id")
	if !auth.ValidUserID(userID) {
		writeError(w, http.StatusBadRequest, "not a user id")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	after, err := s.users.RevokeTokens(ctx, userID, time.Now())
	if err != nil {
		s.log.Error().Err(err).Str("user", userID).Msg("revoke tokens")
		writeError(w, http.StatusServiceUnavailable, "could not store the revocation; try again")
		return
	}
	s.accounts.forget(userID) // at once on this node; other nodes' caches expire within accountCacheTTL
	if err := s.chat.Revoke(userID); err != nil {
		// The tokens are refused already; only the other nodes' open sockets may live on.
		s.log.Error().Err(err).Str("user", userID).Msg("close revoked sessions on other nodes")
		writeError(w, http.StatusServiceUnavailable, "tokens revoked, but other nodes were not told to close the sessions; try again")
		return
	}
	s.log.Warn().Str("event", "revoked").Str("user", userID).Str("remote", r.RemoteAddr).
		Time("tokensValidAfter", after).Msg("security")
	writeJSON(w, http.StatusOK, revokeResponse{UserID: userID, TokensValidAfter: after})
}

type reportsResponse struct {
	Reports []protocol.Report `json:"reports"`
}

// reports lists a group's open reports of messages (see chat.OpenReports), for the operators.
func (s *Server) reports(w http.ResponseWriter, r *http.Request) {
	convID := r.PathValue("id")
	if !protocol.ValidID(convID) {
		writeError(w, http.StatusBadRequest, "not a conversation id")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	defer cancel()
	list, err := s.chat.OpenReports(ctx, convID)
	switch {
	case errors.Is(err, protocol.ErrNotFound):
		writeError(w, http.StatusNotFound, "no such conversation")
	case err != nil:
		s.log.Error().Err(err).Str("conversation", convID).Msg("list reports")
		writeError(w, http.StatusServiceUnavailable, "could not read the reports; try again")
	default:
		writeJSON(w, http.StatusOK, reportsResponse{Reports: list})
	}
}
