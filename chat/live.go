package chat

import (
	"hash/maphash"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/hub"
)

// live is what every part of the service shares: the hub of the node's connections, which also
// keeps who is online here and what the service holds of each of them, the bus the parts publish
// on, and the log.
type live struct {
	cfg Config
	hub *hub.Hub[Conn, *onlineUser]
	bus Bus
	log zerolog.Logger
	// deleted keeps the seqs deleted for everyone of the conversations live here, so unread counts
	// computed from memory leave them out (see unread.go).
	deleted *deletions
	// interest serializes, per conversation or user id, the subscriptions that follow the hub's
	// changes (see watch.go).
	interest interestLocks
}

// newLive returns what the parts of a service share.
func newLive(cfg Config, bus Bus, log zerolog.Logger) *live {
	l := &live{cfg: cfg, hub: hub.New[Conn, *onlineUser](cfg.Hub), bus: bus, log: log, deleted: newDeletions()}
	l.interest.seed = maphash.MakeSeed()
	return l
}

// online returns the state of a user connected here, or nil.
func (s *live) online(userID string) *onlineUser {
	u, _ := s.hub.User(userID)
	return u
}
