package chat

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/chatd/chatd/group"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/storage"
)

// memberStore is what membership reads and writes.
type memberStore interface {
	Conversation(ctx context.Context, id string) (storage.Conversation, error)
	EnsureConversation(ctx context.Context, c storage.Conversation) (storage.Conversation, error)
	MissingUsers(ctx context.Context, ids []string) ([]string, error)
	DeleteAccount(ctx context.Context, userID string) (storage.DeletedAccount, error)
	ConversationsOf(ctx context.Context, userID string) ([]storage.Conversation, error)
}

// membership is the part of the service that makes conversations and changes who is in them:
// opening a DM, creating a group, adding and removing members, leaving, deleting an account.
// Each change is announced through the conversation's owner (seq), which also re-reads the
// members so that the change binds the very next send; blocks decide who may be put together.
// It shares the hub and the bus with the other parts (live) and has a store of its own.
type membership struct {
	*live
	store  memberStore
	seq    Sender
	blocks *blocking
}

// OpenDM opens (or finds) the one DM of userID and peer, unless a block stands between them.
func (s *membership) OpenDM(ctx context.Context, userID, peer string) (protocol.Conversation, error) {
	if peer == userID {
		return protocol.Conversation{}, protocol.Refuse(protocol.ErrInvalid, "a DM needs another user")
	}
	if err := s.blocks.checkDMOpen(ctx, userID, peer); err != nil {
		return protocol.Conversation{}, err
	}
	members := []string{userID, peer}
	slices.Sort(members)
	return s.createConversation(ctx, userID, storage.Conversation{
		ID: DMID(userID, peer), Kind: storage.KindDM, Members: members, CreatedBy: userID, CreatedAt: now(),
	})
}

// CreateGroup creates a group of userID and members, none of whom has a block with userID.
func (s *membership) CreateGroup(ctx context.Context, userID, name string, members []string) (protocol.Conversation, error) {
	all := append([]string{userID}, members...)
	slices.Sort(all)
	all = slices.Compact(all)
	if err := s.blocks.checkAdd(ctx, userID, all); err != nil {
		return protocol.Conversation{}, err
	}
	return s.createConversation(ctx, userID, storage.Conversation{
		ID: uuid.NewString(), Kind: storage.KindGroup, Name: name, Members: all, CreatedBy: userID, CreatedAt: now(),
	})
}

// createConversation stores a conversation (or finds the existing DM), makes it live for the
// creator at once, and tells every member's devices on every node.
func (s *membership) createConversation(ctx context.Context, userID string, c storage.Conversation) (protocol.Conversation, error) {
	missing, err := s.store.MissingUsers(ctx, c.Members)
	if err != nil {
		return protocol.Conversation{}, fmt.Errorf("look up members: %w", err)
	}
	if len(missing) > 0 {
		return protocol.Conversation{}, protocol.Refuse(protocol.ErrNotFound, noSuchUser, missing[0])
	}
	stored, err := s.store.EnsureConversation(ctx, c)
	if err != nil {
		return protocol.Conversation{}, fmt.Errorf("store conversation: %w", err)
	}
	view := toView(stored, position{}, stored.LastSeq)
	// The creator's devices here learn at once (the reply must not wait for the bus); the bus
	// event then changes nothing for them, and reaches the other members.
	s.applyJoin(userID, view, stored.DeletedSeqs)
	for _, m := range stored.Members {
		s.publishUser(m, userEvent{Type: userJoined, Conversation: &view, DeletedSeqs: stored.DeletedSeqs})
	}
	p, err := s.positionOf(userID, stored.ID)
	if err != nil {
		return protocol.Conversation{}, err
	}
	return toView(stored, p, s.lastSeq(stored.ID, p)), nil
}

// group loads a group the user is a member of.
func (s *membership) group(ctx context.Context, userID, convID string) (storage.Conversation, error) {
	if _, err := s.positionOf(userID, convID); err != nil {
		return storage.Conversation{}, err
	}
	c, err := s.store.Conversation(ctx, convID)
	if errors.Is(err, storage.ErrNotFound) {
		return storage.Conversation{}, protocol.ErrNotMember
	}
	if err != nil {
		return storage.Conversation{}, fmt.Errorf("load conversation %s: %w", convID, err)
	}
	if c.Kind != storage.KindGroup {
		return storage.Conversation{}, protocol.Refuse(protocol.ErrForbidden, "members of a DM cannot change")
	}
	return c, nil
}

// announce sequences a system message about a membership change. Reload makes the owner re-read
// the members first, so the change binds the very next send.
func (s *membership) announce(ctx context.Context, convID, actor, body string) (protocol.Message, error) {
	m, err := s.seq.Send(ctx, sequencer.SendRequest{ConversationID: convID, SenderID: actor, ClientMsgID: uuid.NewString(),
		Kind: protocol.KindSystem, Body: body, Reload: true})
	if err != nil {
		// The change is stored and only its announcement failed: a retry of the request would
		// find nothing to change and announce nothing, so this is a failure (internal), not a
		// refusal the client may retry. The owner's refusal (%v, not %w) stays in the log only.
		return protocol.Message{}, fmt.Errorf("announce in %s: %v", convID, err)
	}
	return m, nil
}

// AddMembers adds users to a group userID is in, when the group's rules let userID add (see the
// group package; its owner checks them), but not a user with a block between them and the adder.
func (s *membership) AddMembers(ctx context.Context, userID, convID string, members []string) error {
	c, err := s.group(ctx, userID, convID)
	if err != nil {
		return err
	}
	var added []string
	for _, m := range members {
		if !c.IsMember(m) && !slices.Contains(added, m) {
			added = append(added, m)
		}
	}
	if len(added) == 0 {
		return nil
	}
	missing, err := s.store.MissingUsers(ctx, added)
	if err != nil {
		return fmt.Errorf("look up members: %w", err)
	}
	if len(missing) > 0 {
		return protocol.Refuse(protocol.ErrNotFound, noSuchUser, missing[0])
	}
	if err := s.blocks.checkAdd(ctx, userID, added); err != nil {
		return err
	}
	m, u, err := s.administer(ctx, userID, c.ID, group.Op{Action: group.OpAdd, Users: added})
	if err != nil {
		return err
	}
	// The new members' nodes may hear of the join after the announcement went by: the view
	// includes it, so their clients page it from history.
	view := toView(group.Applied(c, u), position{}, m.Seq)
	for _, m := range u.Add {
		s.publishUser(m, userEvent{Type: userJoined, Conversation: &view, DeletedSeqs: c.DeletedSeqs})
	}
	return nil
}

// RemoveMember takes target out of a group, when the group's rules let userID remove them (see
// the group package; its owner checks them); everyone but its owner may leave (target == userID).
func (s *membership) RemoveMember(ctx context.Context, userID, convID, target string) error {
	if _, err := s.group(ctx, userID, convID); err != nil {
		return err
	}
	_, u, err := s.administer(ctx, userID, convID, group.Op{Action: group.OpRemove, Users: []string{target}})
	if err != nil {
		return err
	}
	s.removed(convID, u)
	return nil
}

// HideConversation deletes a conversation for the user only: out of their list, everything so far
// read, history untouched for others; a newer message brings it back with only the newer messages
// unread.
func (s *messaging) HideConversation(ctx context.Context, userID, convID string) error {
	_, last, err := s.checkedPosition(ctx, userID, convID)
	if err != nil {
		return err
	}
	if err := s.store.HideConversation(ctx, userID, convID, last); err != nil {
		return fmt.Errorf("hide %s for %s: %w", convID, userID, err)
	}
	s.cursors.applyCursor(userID, convID, last, last) // here at once; the bus event reaches other nodes
	s.publishUser(userID, userEvent{Type: userHidden, ConvID: convID, ReadSeq: last})
	return nil
}

// DeleteAccount removes a user and everything of theirs (see storage.DeleteAccount): first each
// group's owner makes the user's messages there tombstones (the owner is the one writer of a
// conversation's messages), then the store forgets the account. It tells the other members'
// devices, tells every node which group messages became tombstones (so its unread counts leave
// them out), makes the owners forget the user's memberships, and closes the user's connections on
// every node.
func (s *membership) DeleteAccount(ctx context.Context, userID string) error {
	convs, err := s.store.ConversationsOf(ctx, userID)
	if err != nil {
		return fmt.Errorf("delete account %s: %w", userID, err)
	}
	tombstoned := make(map[string][]int64)
	for _, c := range convs {
		if c.Kind != storage.KindGroup {
			continue
		}
		if tombstoned[c.ID], err = s.seq.EraseSender(ctx, c.ID, userID); err != nil {
			return fmt.Errorf("delete account %s: %w", userID, err)
		}
	}
	deleted, err := s.store.DeleteAccount(ctx, userID)
	if err != nil {
		return fmt.Errorf("delete account %s: %w", userID, err)
	}
	if err := s.forgetInSearch(userID, deleted); err != nil {
		s.log.Warn().Err(err).Str("user", userID).Msg("remove a deleted account from the search indexes; searches leave it out")
	}
	for _, dm := range deleted.DMs {
		for _, m := range dm.Members {
			s.publishUser(m, userEvent{Type: userLeft, ConvID: dm.ID})
		}
		if err := s.seq.Reload(ctx, dm.ID); err != nil {
			return err
		}
	}
	for _, g := range deleted.Groups {
		s.publishUser(userID, userEvent{Type: userLeft, ConvID: g.ID})
		for seqs := range slices.Chunk(tombstoned[g.ID], maxTombstonedSeqs) {
			s.publishConversation(g.ID, conversationEvent{Type: convTombstoned, Seqs: seqs})
		}
		if _, err := s.announce(ctx, g.ID, "", "a member deleted their account"); err != nil {
			return err
		}
	}
	if s.cfg.Files != nil {
		dmIDs := make([]string, len(deleted.DMs))
		for i, dm := range deleted.DMs {
			dmIDs[i] = dm.ID
		}
		if err := s.cfg.Files.DeleteAccountFiles(ctx, userID, dmIDs); err != nil {
			return fmt.Errorf("delete account %s: %w", userID, err)
		}
	}
	s.publishUser(userID, userEvent{Type: userDeleted})
	return nil
}
