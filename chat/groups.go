package chat

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/chatd/chatd/group"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
)

// ModerateRequest is one moderate frame: an administrative change of a group (see
// protocol.TypeModerate for the actions and the fields each takes).
type ModerateRequest struct {
	Action  string
	UserID  string
	Name    string
	Topic   string
	Enabled bool
	Seconds int64
	Seq     int64
}

// Moderate makes an administrative change of a group userID is in: roles, name, topic,
// settings, mutes, bans, pins. The conversation's owner checks it against the group's rules and
// tells the group with a system message; a banned member is taken out like a removed one.
func (s *membership) Moderate(ctx context.Context, userID, convID string, req ModerateRequest) error {
	if _, err := s.positionOf(userID, convID); err != nil {
		return err
	}
	op := group.Op{Action: req.Action, Enabled: req.Enabled, Seconds: req.Seconds, Seq: req.Seq}
	switch req.Action {
	case protocol.ActionRename:
		op.Text = req.Name
	case protocol.ActionSetTopic:
		op.Text = req.Topic
	}
	if req.UserID != "" {
		op.Users = []string{req.UserID}
	}
	_, u, err := s.administer(ctx, userID, convID, op)
	if err != nil {
		return err
	}
	s.removed(convID, u)
	return nil
}

// administer asks the conversation's owner to make an administrative change of a group by
// userID, and returns the system message that told the group and what changed.
func (s *membership) administer(ctx context.Context, userID, convID string, op group.Op) (protocol.Message, storage.GroupUpdate, error) {
	m, u, err := s.seq.Administer(ctx, sequencer.SendRequest{ConversationID: convID, SenderID: userID,
		ClientMsgID: uuid.NewString(), Group: &op})
	var refusal *protocol.Error
	switch {
	case errors.Is(err, protocol.ErrUnavailable):
		s.log.Warn().Err(err).Str("conversation", convID).Msg("group change not acknowledged")
		return m, u, protocol.Refuse(protocol.ErrUnavailable, "the group may not have changed; try again")
	case errors.As(err, &refusal):
		return m, u, refusal // the owner's word, with its reason
	case err != nil:
		return m, u, fmt.Errorf("%s in %s: %w", op.Action, convID, err)
	}
	return m, u, nil
}

// removed takes the member a change removed (if any) out of the conversation: here at once, so
// their next frame is refused, and on their other nodes through the bus.
func (s *membership) removed(convID string, u storage.GroupUpdate) {
	if u.Remove == "" {
		return
	}
	s.applyLeave(u.Remove, convID)
	s.publishUser(u.Remove, userEvent{Type: userLeft, ConvID: convID})
}
