package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/storage"
)

// group loads a group the user is a member of.
func (h *Hub) group(ctx context.Context, userID, convID string) (storage.Conversation, error) {
	if _, err := h.membershipOf(userID, convID); err != nil {
		return storage.Conversation{}, err
	}
	c, err := h.store.Conversation(ctx, convID)
	if errors.Is(err, storage.ErrNotFound) {
		return storage.Conversation{}, errNotMember
	}
	if err != nil {
		return storage.Conversation{}, err
	}
	if c.Kind != storage.KindGroup {
		return storage.Conversation{}, protocol.Errorf(protocol.CodeForbidden, "members of a DM cannot change")
	}
	return c, nil
}

// announce sequences a system message about a membership change. Reload makes the owner re-read
// the members first, so the change binds the very next send.
func (h *Hub) announce(ctx context.Context, convID, actor, body string) error {
	_, err := h.seq.Send(ctx, sequencer.SendRequest{ConversationID: convID, SenderID: actor, ClientMsgID: uuid.NewString(),
		Kind: storage.KindSystem, Body: body, Reload: true})
	if err != nil {
		return fmt.Errorf("announce in %s: %w", convID, err)
	}
	return nil
}

func (h *Hub) addMembers(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	c, err := h.group(ctx, s.UserID(), f.ConversationID)
	if err != nil {
		return err
	}
	var added []string
	for _, m := range f.Members {
		if !c.IsMember(m) && !slices.Contains(added, m) {
			added = append(added, m)
		}
	}
	if len(added) == 0 {
		s.Reply(protocol.ServerFrame{Type: protocol.TypeOK, ID: f.ID})
		return nil
	}
	missing, err := h.store.MissingUsers(ctx, added)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return protocol.Errorf(protocol.CodeNotFound, "no such user: %s", missing[0])
	}
	if err := h.store.AddMembers(ctx, c.ID, added); err != nil {
		return err
	}
	if err := h.announce(ctx, c.ID, s.UserID(), s.UserID()+" added "+strings.Join(added, ", ")); err != nil {
		return err
	}
	c.Members = append(c.Members, added...)
	view := toView(c, membership{lastSeq: c.LastSeq})
	for _, m := range added {
		h.publishUserEvent(m, userEvent{Type: userJoined, Conversation: &view})
	}
	s.Reply(protocol.ServerFrame{Type: protocol.TypeOK, ID: f.ID})
	return nil
}

// removeMember takes a user out of a group: the creator may remove anyone, everyone may leave.
func (h *Hub) removeMember(ctx context.Context, s *session.Session, reqID, convID, userID string) error {
	c, err := h.group(ctx, s.UserID(), convID)
	if err != nil {
		return err
	}
	if userID != s.UserID() && c.CreatedBy != s.UserID() {
		return protocol.Errorf(protocol.CodeForbidden, "only the group's creator can remove members")
	}
	if !c.IsMember(userID) {
		return protocol.Errorf(protocol.CodeNotFound, "%s is not in this group", userID)
	}
	if err := h.store.RemoveMember(ctx, convID, userID); err != nil {
		return err
	}
	body := s.UserID() + " removed " + userID
	if userID == s.UserID() {
		body = userID + " left"
	}
	h.publishUserEvent(userID, userEvent{Type: userLeft, ConvID: convID})
	h.applyLeave(userID, convID)
	if err := h.announce(ctx, convID, s.UserID(), body); err != nil {
		return err
	}
	s.Reply(protocol.ServerFrame{Type: protocol.TypeOK, ID: reqID})
	return nil
}

// deleteMessage tombstones one of the user's own messages for everyone; its seq stays.
func (h *Hub) deleteMessage(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	if _, err := h.membershipOf(s.UserID(), f.ConversationID); err != nil {
		return err
	}
	err := h.store.DeleteMessage(ctx, f.ConversationID, f.Seq, s.UserID())
	if errors.Is(err, storage.ErrNotFound) {
		return protocol.Errorf(protocol.CodeForbidden, "no message %d of yours to delete", f.Seq)
	}
	if err != nil {
		return err
	}
	h.publishConversationEvent(f.ConversationID, conversationEvent{Type: protocol.TypeDeleted, UserID: s.UserID(), Seq: f.Seq})
	s.Reply(protocol.ServerFrame{Type: protocol.TypeOK, ID: f.ID})
	return nil
}

// hideConversation deletes a conversation for the user only: out of their list, history untouched
// for others; a newer message brings it back with only the newer messages unread.
func (h *Hub) hideConversation(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	_, last, err := h.position(ctx, s.UserID(), f.ConversationID)
	if err != nil {
		return err
	}
	if err := h.store.HideConversation(ctx, s.UserID(), f.ConversationID, last); err != nil {
		return err
	}
	h.applyHide(s.UserID(), f.ConversationID, last)
	h.publishUserEvent(s.UserID(), userEvent{Type: userHidden, ConvID: f.ConversationID, ReadSeq: last})
	s.Reply(protocol.ServerFrame{Type: protocol.TypeOK, ID: f.ID})
	return nil
}

// DeleteAccount removes a user and everything of theirs (see storage.DeleteAccount), tells the
// other members' devices, makes the owners forget the user's memberships, and closes the user's
// sessions on every node.
func (h *Hub) DeleteAccount(ctx context.Context, userID string) error {
	deleted, err := h.store.DeleteAccount(ctx, userID)
	if err != nil {
		return err
	}
	for _, dm := range deleted.DMs {
		for _, m := range dm.Members {
			h.publishUserEvent(m, userEvent{Type: userLeft, ConvID: dm.ID})
		}
		if err := h.seq.Reload(ctx, dm.ID); err != nil {
			return err
		}
	}
	for _, g := range deleted.Groups {
		h.publishUserEvent(userID, userEvent{Type: userLeft, ConvID: g.ID})
		if err := h.announce(ctx, g.ID, "", "a member deleted their account"); err != nil {
			return err
		}
	}
	h.publishUserEvent(userID, userEvent{Type: userDeleted})
	return nil
}
