package attach

import (
	"context"
	"errors"
	"fmt"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
)

var _ sequencer.Files = (*Service)(nil)

// Why files were deleted: the values of chatd_files_deleted_total's reason label.
const (
	deletedWithMessage = "message_deleted"
	deletedWithAccount = "account_deleted"
	deletedCollected   = "collected"
	deletedOrphan      = "orphan"
)

var deleteReasons = []string{deletedWithMessage, deletedWithAccount, deletedCollected, deletedOrphan}

// Attach is sequencer.Files.Attach: the owner of conversationID calls it before it stores the
// send. The uploads are marked attached first, so that if the message is then stored they are
// never collected; if it is not, a retry of the same send attaches them again, and the collector
// deletes them once it finds no message of that send. An upload counts as pending for attaching
// only while younger than half the pending TTL, so the collector, which takes uploads older than
// the whole TTL, never deletes one a send in flight is attaching.
func (s *Service) Attach(ctx context.Context, conversationID, senderID, clientMsgID string, ids []string) ([]storage.Attachment, error) {
	if len(ids) > s.cfg.MaxFilesPerMessage {
		return nil, protocol.Refuse(protocol.ErrInvalid, "at most %d files per message", s.cfg.MaxFilesPerMessage)
	}
	uploads, err := s.store.Uploads(ctx, ids)
	if err != nil {
		return nil, err
	}
	oldest := s.now().Add(-s.cfg.PendingTTL / 2)
	files := make([]storage.Attachment, len(ids))
	var pending []string
	for i, id := range ids {
		u, ok := uploads[id]
		switch {
		case !ok || u.UploaderID != senderID || u.ConversationID != conversationID:
			// Someone else's upload, or another conversation's, is told apart from none at all
			// by nobody, so ids cannot be probed.
			return nil, protocol.Refuse(protocol.ErrNotFound, "upload %s is not one of yours in this conversation", id)
		case u.ClientMsgID == clientMsgID: // a retry of the send that attached it
		case u.ClientMsgID != "":
			return nil, protocol.Refuse(protocol.ErrNotFound, "upload %s is attached to another message already", id)
		case u.CreatedAt.Before(oldest):
			return nil, protocol.Refuse(protocol.ErrNotFound, "upload %s has expired: send within %s of uploading", id, s.cfg.PendingTTL/2)
		default:
			pending = append(pending, id)
		}
		files[i] = u.Attachment()
	}
	if len(pending) > 0 {
		if err := s.store.AttachUploads(ctx, pending, clientMsgID); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// Remove is sequencer.Files.Remove: the files of a message deleted for everyone go.
func (s *Service) Remove(ctx context.Context, files []storage.Attachment) {
	ids := make([]string, len(files))
	for i, f := range files {
		ids[i] = f.ID
	}
	if err := s.removeByID(ctx, ids, deletedWithMessage); err != nil {
		s.log.Error().Err(err).Strs("uploads", ids).Msg("delete the files of a deleted message")
	}
}

// removeByID deletes uploads by id, with their objects.
func (s *Service) removeByID(ctx context.Context, ids []string, why string) error {
	uploads, err := s.store.Uploads(ctx, ids)
	if err != nil {
		return err
	}
	list := make([]storage.Upload, 0, len(uploads))
	for _, u := range uploads {
		list = append(list, u)
	}
	_, err = s.deleteUploads(ctx, list, why)
	return err
}

// DeleteAccountFiles is chat.AccountFiles: the files a deleted user uploaded, wherever, and all
// files of the DMs the deletion removed.
func (s *Service) DeleteAccountFiles(ctx context.Context, userID string, dmIDs []string) error {
	uploads, err := s.store.UploadsOfAccount(ctx, userID, dmIDs)
	if err != nil {
		return err
	}
	if _, err := s.deleteUploads(ctx, uploads, deletedWithAccount); err != nil {
		return fmt.Errorf("delete the files of %s: %w", userID, err)
	}
	return nil
}

// ErrNoFile is returned by Open for an upload that does not exist (or no longer).
var ErrNoFile = errors.New("no such file")
