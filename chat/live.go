package chat

import (
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/hub"
)

// live is what every part of the service shares: the hub of the node's connections, which also
// keeps who is online here and what the service holds of each of them, the bus the parts publish
// on, and the log.
type live struct {
	hub *hub.Hub[Conn, *onlineUser]
	bus Bus
	log zerolog.Logger
	// deleted keeps the seqs deleted for everyone of the conversations live here, so unread counts
	// computed from memory leave them out (see unread.go).
	deleted *deletions
}

// online returns the state of a user connected here, or nil.
func (s *live) online(userID string) *onlineUser {
	u, _ := s.hub.User(userID)
	return u
}
