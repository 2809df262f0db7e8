package chat

import (
	"context"
	"errors"
	"fmt"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// AccountFiles deletes the files of a deleted account: those the user uploaded anywhere, and
// every file of the DMs the deletion removed (the attach package implements it).
type AccountFiles interface {
	DeleteAccountFiles(ctx context.Context, userID string, dmIDs []string) error
}

// CheckUpload refuses an upload of userID into a conversation they may not send to: one that
// does not exist or that they are not a member of (protocol.ErrNotMember), or a DM with a block
// between its members (protocol.ErrForbidden). It reads the store, not this node's memory: an
// HTTP upload comes from a user who may have no connection here.
func (s *Service) CheckUpload(ctx context.Context, userID, convID string) error {
	c, err := s.memberOf(ctx, userID, convID)
	if err != nil || c.Kind != storage.KindDM {
		return err
	}
	blocked, err := s.store.Blocked(ctx, userID, dmPeer(c.Kind, c.Members, userID))
	if err != nil {
		return fmt.Errorf("look up blocks in %s: %w", convID, err)
	}
	if blocked {
		return protocol.Refuse(protocol.ErrForbidden, "you cannot send to this user: a block stands between you")
	}
	return nil
}

// CheckMember refuses, with protocol.ErrNotMember, a user who is not now a member of the
// conversation: files are served to current members only.
func (s *Service) CheckMember(ctx context.Context, userID, convID string) error {
	_, err := s.memberOf(ctx, userID, convID)
	return err
}

// memberOf reads a conversation and refuses a user who is not in it.
func (s *Service) memberOf(ctx context.Context, userID, convID string) (storage.Conversation, error) {
	c, err := s.store.Conversation(ctx, convID)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return c, protocol.ErrNotMember
	case err != nil:
		return c, fmt.Errorf("load conversation %s: %w", convID, err)
	case !c.IsMember(userID):
		return c, protocol.ErrNotMember
	}
	return c, nil
}
