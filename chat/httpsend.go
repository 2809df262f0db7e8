package chat

import (
	"context"
	"errors"
	"fmt"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// SendWithoutSocket is Send for a sender who may have no connection on this node (a bot's HTTP
// send): membership is read from the store, and in a DM the block between its members too,
// rather than from the memory an online user has here. The owner checks membership again, as
// for every send; a retry with the same clientMsgId is answered with the stored message.
func (s *messaging) SendWithoutSocket(ctx context.Context, userID string, req SendRequest) (protocol.Message, error) {
	if s.online(userID) != nil {
		return s.Send(ctx, userID, req)
	}
	conv, err := s.store.Conversation(ctx, req.ConversationID)
	switch {
	case errors.Is(err, storage.ErrNotFound) || (err == nil && !conv.IsMember(userID)):
		return protocol.Message{}, protocol.ErrNotMember
	case err != nil:
		return protocol.Message{}, fmt.Errorf("read %s before a send: %w", req.ConversationID, err)
	}
	if peer := dmPeer(conv.Kind, conv.Members, userID); peer != "" {
		blocked, err := s.blocks.store.Blocked(ctx, userID, peer)
		if err != nil {
			return protocol.Message{}, fmt.Errorf("check blocks before a send: %w", err)
		}
		if blocked {
			return protocol.Message{}, protocol.Refuse(protocol.ErrForbidden, "you cannot send to this user: a block stands between you")
		}
	}
	return s.sequence(ctx, userID, req)
}
