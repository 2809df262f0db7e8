package storage

import "context"

// ConversationIDsAfter lists up to limit conversation ids after after, in _id order: a walk over
// every conversation, a page at a time, for work that must visit them all (a node's search
// index compares itself with each one's counters). On the embedded store each page reads the
// whole collection; it is not for a hot path.
func (s *Store) ConversationIDsAfter(ctx context.Context, after string, limit int) ([]string, error) {
	return s.conversationIDsAfter(ctx, after, limit)
}
