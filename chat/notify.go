package chat

import (
	"context"
	"fmt"

	"github.com/chatd/chatd/protocol"
)

// Notification settings: per conversation, a member is notified for every message (the
// default), only for the messages that mention them, or for nothing. The setting is stored per
// user on the server, so it holds on every device (and for push notifications); the list and
// sync views carry it, and a change reaches the user's devices as a notify frame.

// userNotify carries a user's changed notification setting to their devices on every node.
const userNotify = "notify"

// SetNotify stores userID's notification setting for a conversation they are a member of.
func (s *messaging) SetNotify(ctx context.Context, userID, convID, level string) error {
	if _, err := s.positionOf(userID, convID); err != nil {
		return err
	}
	stored := level
	if level == protocol.NotifyAll {
		stored = "" // the default is not stored
	}
	if err := s.store.SetNotify(ctx, userID, convID, stored); err != nil {
		return fmt.Errorf("set notify for %s: %w", userID, err)
	}
	s.publishUser(userID, userEvent{Type: userNotify, ConvID: convID, Notify: level})
	return nil
}

// applyNotify tells a user's devices here their new setting. Coalesced per conversation: only
// the newest setting matters.
func (s *live) applyNotify(userID string, ev userEvent) {
	s.ephemeralToUser(userID, "notify:"+ev.ConvID, protocol.ServerFrame{Type: protocol.TypeNotify, ConversationID: ev.ConvID, Notify: ev.Notify})
}
