package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/google/uuid"

	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
)

// EditMessage replaces the text of one of userID's own messages. The message keeps its seq;
// every member's devices get an edited frame, and pages show the new text with its edit time.
func (s *messaging) EditMessage(ctx context.Context, userID, convID string, seq int64, body string) error {
	return s.change(ctx, userID, sequencer.SendRequest{ConversationID: convID, Op: message.OpEdit, Seq: seq, Body: body})
}

// DeleteMessage tombstones one of userID's own messages for everyone; its seq stays. The owner
// records the seq on the conversation, so unread counts leave it out, and every node that hears
// the change tells its members' devices with a deleted frame (this node's counts learn it at once).
func (s *messaging) DeleteMessage(ctx context.Context, userID, convID string, seq int64) error {
	if err := s.change(ctx, userID, sequencer.SendRequest{ConversationID: convID, Op: message.OpDelete, Seq: seq}); err != nil {
		return err
	}
	s.learnDeleted(convID, []int64{seq})
	return nil
}

// React adds userID's emoji to a message, or takes it away. Adding one already there, or taking
// away one that is not, changes nothing and succeeds.
func (s *messaging) React(ctx context.Context, userID, convID string, seq int64, emoji string, remove bool) error {
	op := message.OpReact
	if remove {
		op = message.OpUnreact
	}
	return s.change(ctx, userID, sequencer.SendRequest{ConversationID: convID, Op: op, Seq: seq, Emoji: emoji})
}

// change sends one change of a stored message through its conversation's owner, which checks it
// against the message as stored, numbers it and publishes it once stored.
func (s *messaging) change(ctx context.Context, userID string, req sequencer.SendRequest) error {
	if _, err := s.positionOf(userID, req.ConversationID); err != nil {
		return err
	}
	req.SenderID = userID
	req.ClientMsgID = uuid.NewString() // a retry of this request to a busy owner is made once
	_, err := s.seq.Send(ctx, req)
	var refusal *protocol.Error
	switch {
	case errors.Is(err, protocol.ErrUnavailable):
		s.log.Warn().Err(err).Str("conversation", req.ConversationID).Msg("change not acknowledged")
		return protocol.Refuse(protocol.ErrUnavailable, "message not changed; try again")
	case errors.As(err, &refusal):
		// The owner's word, with its reason: not a member, no such message, not allowed, a limit.
		return refusal
	case err != nil:
		return fmt.Errorf("%s message %s/%d: %w", req.Op, req.ConversationID, req.Seq, err)
	}
	return nil
}

// Reactions lists who reacted to one message with what: the per-user lists that pages and
// pushes leave out (large groups get counts only).
func (s *messaging) Reactions(ctx context.Context, userID, convID string, seq int64) ([]protocol.Reaction, error) {
	if _, err := s.positionOf(userID, convID); err != nil {
		return nil, err
	}
	msgs, err := s.store.MessageRange(ctx, convID, seq, seq)
	if err != nil {
		return nil, fmt.Errorf("load message %s/%d: %w", convID, seq, err)
	}
	if len(msgs) == 0 {
		return nil, protocol.Refuse(protocol.ErrNotFound, "no message %d in this conversation", seq)
	}
	return message.Reactors(msgs[0], userID), nil
}

// Focus records which of its user's conversations a connection shows ("" for none): a large
// group's reactions are pushed only to the connections that show it.
func (s *messaging) Focus(c Conn, convID string) error {
	if convID != "" {
		if _, err := s.positionOf(c.UserID(), convID); err != nil {
			return err
		}
	}
	s.hub.Focus(c, convID)
	return nil
}

// HandleChange delivers a change of a stored message, as its owner published it, to the local
// members: one encoding, the same bytes on every socket. Edits and deletions reach every
// connection of every member; reactions too in DMs and groups of up to LiveReceiptsMaxMembers,
// and in larger groups only the connections that have the conversation in focus, so a reaction
// costs no frame per member of a large group. A deletion also takes the message out of the
// unread counts computed here; it moves no badge (clients subtract it, see docs/PROTOCOL.md).
func (s *messaging) HandleChange(convID string, data []byte) {
	var ch sequencer.Change
	if err := json.Unmarshal(data, &ch); err != nil || ch.ConversationID != convID {
		s.log.Error().Err(err).Str("conversation", convID).Msg("undecodable change event")
		return
	}
	f := protocol.ServerFrame{ConversationID: convID, Seq: ch.Seq, Version: ch.Version, UserID: ch.UserID}
	switch ch.Op {
	case message.OpEdit:
		f.Type, f.Body, f.EditedAt, f.Mentions = protocol.TypeEdited, ch.Body, ch.EditedAt, ch.Mentions
		s.mentioned(convID, ch.Seq, ch.Mentions, true, ch.UserID)
	case message.OpDelete:
		f.Type = protocol.TypeDeleted
		s.learnDeleted(convID, []int64{ch.Seq})
	case message.OpReact, message.OpUnreact:
		f.Type, f.Emoji, f.Remove, f.Count = protocol.TypeReaction, ch.Emoji, ch.Op == message.OpUnreact, &ch.Count
	default:
		s.log.Error().Str("conversation", convID).Str("op", ch.Op).Msg("unknown change event")
		return
	}
	s.mentioned(convID, ch.Seq, ch.Unmentioned, false, "")
	frame, err := protocol.Encode(f)
	if err != nil {
		s.log.Error().Err(err).Msg("encode change")
		return
	}
	if f.Type == protocol.TypeReaction && ch.Members > s.cfg.LiveReceiptsMaxMembers {
		s.hub.PushToFocused(convID, frame)
		return
	}
	s.hub.PushToConversation(convID, "", frame)
}

// catchUp gives a syncing connection, per conversation it names with the change version it holds,
// the messages changed since (edits, reactions, deletions) among those it holds (seq up to since,
// all when since does not name the conversation), at most SyncLimit per conversation, as one
// changes frame each; conversations with no change get none.
func (s *messaging) catchUp(ctx context.Context, c Conn, since, versions map[string]int64) error {
	uid := c.UserID()
	for convID, have := range versions {
		if _, err := s.positionOf(uid, convID); err != nil {
			continue // a conversation the user left or never had
		}
		held, ok := since[convID]
		if !ok {
			held = math.MaxInt64
		}
		msgs, err := s.changedMessages(ctx, convID, have, held)
		if err != nil {
			return fmt.Errorf("catch up on changes of %s: %w", convID, err)
		}
		if len(msgs) == 0 {
			continue
		}
		f := protocol.ServerFrame{Type: protocol.TypeChanges, ConversationID: convID, Messages: make([]protocol.Message, len(msgs)),
			Version: msgs[len(msgs)-1].Version, HasMore: len(msgs) == s.cfg.SyncLimit}
		for i, m := range msgs {
			f.Messages[i] = s.viewOf(m, uid)
		}
		frame, err := protocol.Encode(f)
		if err != nil {
			return err
		}
		if err := c.PushWait(ctx, frame); err != nil {
			return err
		}
	}
	return nil
}

// changedMessages reads, in one of the node's sync read slots, the messages of a conversation
// changed after version with seq at most maxSeq.
func (s *messaging) changedMessages(ctx context.Context, convID string, version, maxSeq int64) ([]storage.Message, error) {
	release, err := s.syncReadSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return s.store.ChangedMessages(ctx, convID, version, maxSeq, s.cfg.SyncLimit)
}

// viewOf is a stored message as viewer sees it in a page, a sync replay or a catch-up: their own
// reactions marked, and a quote of a message deleted since it was quoted shown as deleted.
func (s *messaging) viewOf(m storage.Message, viewer string) protocol.Message {
	w := message.View(m, viewer)
	if q := w.Quote; q != nil && !q.Deleted {
		if _, deleted := slices.BinarySearch(s.deleted.of(m.ConversationID), m.ReplyTo); deleted {
			w.Quote = &protocol.Quote{SenderID: q.SenderID, Deleted: true}
		}
	}
	return w
}
