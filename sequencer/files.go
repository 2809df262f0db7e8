package sequencer

import (
	"context"
	"errors"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// Files is what the owner needs of attachments (the attach package implements it): a send's
// uploads checked and marked attached before the message holding them is stored, so a stored
// message never names a file that is not kept, and a deleted message's files removed.
type Files interface {
	// Attach checks that every id names a pending upload of senderID in conversationID, young
	// enough that the collector of unreferenced uploads will not take it meanwhile, or one
	// already attached to this same send (clientMsgID: a retry); marks them attached to the send;
	// and returns what the message shows of them, in the order of ids. A refusal for the user is a
	// *protocol.Error; any other error means the store failed and nothing may be stored.
	Attach(ctx context.Context, conversationID, senderID, clientMsgID string, ids []string) ([]storage.Attachment, error)
	// Remove deletes the files of a message whose deletion for everyone is stored. It logs what
	// it could not delete; the message no longer names them either way.
	Remove(ctx context.Context, files []storage.Attachment)
}

// attach gives e's send the files it names, or sets e's answer and reports false.
func (p *partition) attach(ctx context.Context, e *entry) ([]storage.Attachment, bool) {
	if len(e.req.Attachments) == 0 {
		return nil, true
	}
	if p.seq.cfg.Files == nil {
		e.refused, e.reason = protocol.Refuse(protocol.ErrInvalid, "this server takes no attachments"), failRefused
		return nil, false
	}
	files, err := p.seq.cfg.Files.Attach(ctx, e.req.ConversationID, e.req.SenderID, e.req.ClientMsgID, e.req.Attachments)
	var refusal *protocol.Error
	switch {
	case errors.As(err, &refusal):
		e.refused, e.reason = refusal, failRefused
		return nil, false
	case err != nil:
		p.seq.log.Error().Err(err).Str("conversation", e.req.ConversationID).Msg("attach uploads")
		e.refused, e.reason = protocol.ErrUnavailable, failStore
		return nil, false
	}
	return files, true
}

// removeFiles deletes the files of the messages the batch deleted for everyone, after the
// answers: their tombstones are stored, so nothing shows the files any more (also when the answer
// was lost to a handover: the retry finds the message deleted and would not remove them).
func (p *partition) removeFiles(ctx context.Context, entries []*entry) {
	for _, e := range entries {
		if len(e.removedFiles) > 0 && e.changeStored {
			p.seq.cfg.Files.Remove(ctx, e.removedFiles)
		}
	}
}
