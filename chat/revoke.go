package chat

import (
	"encoding/json"
	"fmt"
)

// userRevoked is the user event that closes a user's connections on every node because an
// operator revoked their tokens (the HTTP layer refuses the tokens themselves).
const userRevoked = "revoked"

// revokedReason is the close reason of a revoked session (close code 4003, like a deleted account).
const revokedReason = "session revoked"

// Revoke closes every connection of userID with 4003 "session revoked": here at once, and on the
// other nodes when they hear the user event. It is idempotent; the error says the other nodes
// were not told.
func (s *Service) Revoke(userID string) error {
	s.applyRevoke(userID)
	data, err := json.Marshal(userEvent{Type: userRevoked})
	if err != nil {
		return fmt.Errorf("encode revocation of %s: %w", userID, err)
	}
	if err := s.bus.PublishUser(userID, data); err != nil {
		return fmt.Errorf("publish revocation of %s: %w", userID, err)
	}
	return nil
}

// applyRevoke closes the user's connections on this node.
func (s *Service) applyRevoke(userID string) {
	for _, c := range s.hub.Conns(userID) {
		c.End(revokedReason)
	}
}
