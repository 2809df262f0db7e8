package hub

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/google/uuid"

	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/sequencer"
	"github.com/chatd/chatd/session"
	"github.com/chatd/chatd/storage"
)

// dmNamespace makes DM ids: a pair of users always maps to the same conversation id.
var dmNamespace = uuid.MustParse("6f1c1f0e-8a4e-4f43-9d0a-3b7a3c2e9d11")

// DMID is the conversation id of the DM between two users, the same whichever opens it.
func DMID(a, b string) string {
	if a > b {
		a, b = b, a
	}
	return uuid.NewSHA1(dmNamespace, []byte(a+"\n"+b)).String()
}

// HandleFrame answers one client frame. Identity always comes from the session.
func (h *Hub) HandleFrame(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	timeout := h.cfg.OpTimeout
	if f.Type == protocol.TypeSend {
		timeout = h.cfg.SendTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch f.Type {
	case protocol.TypeSend:
		return h.send(ctx, s, f)
	case protocol.TypeOpenDM:
		return h.openDM(ctx, s, f)
	case protocol.TypeCreateGroup:
		return h.createGroup(ctx, s, f)
	case protocol.TypeListConversations:
		return h.listConversations(ctx, s, f)
	case protocol.TypeSync:
		return h.sync(ctx, s, f)
	case protocol.TypeHistory:
		return h.history(ctx, s, f)
	case protocol.TypeRead:
		return h.read(ctx, s, f)
	case protocol.TypeReceipts:
		return h.receipts(ctx, s, f)
	case protocol.TypeTyping:
		return h.typing(s, f)
	case protocol.TypeSetPrivacy:
		return h.setPrivacy(ctx, s, f)
	case protocol.TypeAddMembers:
		return h.addMembers(ctx, s, f)
	case protocol.TypeRemoveMember:
		return h.removeMember(ctx, s, f.ID, f.ConversationID, f.UserID)
	case protocol.TypeLeave:
		return h.removeMember(ctx, s, f.ID, f.ConversationID, s.UserID())
	case protocol.TypeDeleteMessage:
		return h.deleteMessage(ctx, s, f)
	case protocol.TypeHideConversation:
		return h.hideConversation(ctx, s, f)
	default:
		return protocol.Errorf(protocol.CodeUnknownType, "frame type %q is not supported", f.Type)
	}
}

var errNotMember = &protocol.Error{Code: protocol.CodeNotMember, Message: "no such conversation, or you are not a member"}

// membershipOf returns a copy of the user's membership, or errNotMember.
func (h *Hub) membershipOf(userID, convID string) (membership, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if u, ok := h.users[userID]; ok {
		if m, ok := u.memberships[convID]; ok {
			return *m, nil
		}
	}
	return membership{}, errNotMember
}

func (h *Hub) send(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	if _, err := h.membershipOf(s.UserID(), f.ConversationID); err != nil {
		return err
	}
	m, err := h.seq.Send(ctx, sequencer.SendRequest{
		ConversationID: f.ConversationID,
		SenderID:       s.UserID(),
		ClientMsgID:    f.ClientMsgID,
		Kind:           protocol.KindText,
		Body:           f.Body,
		ReplyTo:        f.ReplyTo,
	})
	switch {
	case errors.Is(err, sequencer.ErrNotMember):
		return errNotMember
	case errors.Is(err, sequencer.ErrUnavailable):
		h.log.Warn().Err(err).Str("conversation", f.ConversationID).Msg("send not acknowledged")
		return &protocol.Error{Code: protocol.CodeUnavailable, Message: "message not stored; retry with the same clientMsgId", Retryable: true}
	case err != nil:
		return fmt.Errorf("send to %s: %w", f.ConversationID, err)
	}
	h.reads.Advance(storage.Cursor{UserID: s.UserID(), ConversationID: m.ConversationID, ReadSeq: m.Seq,
		Hidden: h.hidesReceipts(s.UserID()), UpdatedAt: now()})
	s.Reply(protocol.ServerFrame{Type: protocol.TypeAck, ID: f.ID, ConversationID: m.ConversationID,
		Seq: m.Seq, ClientMsgID: m.ClientMsgID, CreatedAt: &m.CreatedAt})
	return nil
}

func (h *Hub) hidesReceipts(userID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	u, ok := h.users[userID]
	return ok && u.hideReceipts
}

func (h *Hub) openDM(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	me, peer := s.UserID(), f.UserID
	if peer == me {
		return protocol.Errorf(protocol.CodeInvalidField, "a DM needs another user")
	}
	members := []string{me, peer}
	slices.Sort(members)
	return h.createConversation(ctx, s, f.ID, storage.Conversation{
		ID: DMID(me, peer), Kind: storage.KindDM, Members: members, CreatedBy: me, CreatedAt: now(),
	})
}

func (h *Hub) createGroup(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	members := append([]string{s.UserID()}, f.Members...)
	slices.Sort(members)
	members = slices.Compact(members)
	return h.createConversation(ctx, s, f.ID, storage.Conversation{
		ID: uuid.NewString(), Kind: storage.KindGroup, Name: f.Name, Members: members,
		CreatedBy: s.UserID(), CreatedAt: now(),
	})
}

// createConversation stores a conversation (or finds the existing DM), makes it live for the
// creator at once, and tells every member's devices on every node.
func (h *Hub) createConversation(ctx context.Context, s *session.Session, reqID string, c storage.Conversation) error {
	missing, err := h.store.MissingUsers(ctx, c.Members)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return protocol.Errorf(protocol.CodeNotFound, "no such user: %s", missing[0])
	}
	stored, err := h.store.EnsureConversation(ctx, c)
	if err != nil {
		return err
	}
	view := toView(stored, membership{lastSeq: stored.LastSeq})
	h.applyJoin(s.UserID(), view)
	for _, m := range stored.Members {
		h.publishUserEvent(m, userEvent{Type: userJoined, Conversation: &view})
	}
	ms, err := h.membershipOf(s.UserID(), stored.ID)
	if err != nil {
		return err
	}
	mine := toView(stored, ms)
	s.Reply(protocol.ServerFrame{Type: protocol.TypeConversation, ID: reqID, Conversation: &mine})
	return nil
}

func toView(c storage.Conversation, m membership) protocol.Conversation {
	last := max(c.LastSeq, m.lastSeq)
	read := min(m.readSeq, last)
	first := int64(0)
	if last > m.hiddenSeq {
		first = m.hiddenSeq + 1
	}
	return protocol.Conversation{
		ID: c.ID, Kind: c.Kind, Name: c.Name, Members: c.Members, FirstSeq: first, LastSeq: last,
		ReadSeq: read, Unread: last - read, CreatedAt: c.CreatedAt,
	}
}

func (h *Hub) conversationViews(ctx context.Context, userID string) ([]protocol.Conversation, error) {
	convs, err := h.store.ConversationsOf(ctx, userID)
	if err != nil {
		return nil, err
	}
	views := make([]protocol.Conversation, 0, len(convs))
	for _, c := range convs {
		ms, _ := h.membershipOf(userID, c.ID) // not yet live here: zero position, clamped below
		if ms.hiddenSeq > 0 && max(c.LastSeq, ms.lastSeq) <= ms.hiddenSeq {
			continue // deleted for this user, and nothing new since
		}
		views = append(views, toView(c, ms))
	}
	return views, nil
}

func (h *Hub) listConversations(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	views, err := h.conversationViews(ctx, s.UserID())
	if err != nil {
		return err
	}
	s.Reply(protocol.ServerFrame{Type: protocol.TypeConversations, ID: f.ID, Conversations: views})
	return nil
}

// sync replays, per conversation the client names, the messages after the seq it holds (up to
// SyncLimit each), then answers with the user's conversations so the client learns of new ones
// and of anything still missing beyond the limit.
func (h *Hub) sync(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	for convID, have := range f.Since {
		if _, err := h.membershipOf(s.UserID(), convID); err != nil {
			continue // a conversation the user left or never had: nothing to replay
		}
		msgs, err := h.store.MessageRange(ctx, convID, have+1, have+int64(h.cfg.SyncLimit))
		if err != nil {
			return err
		}
		for _, m := range msgs {
			frame, err := protocol.EncodeMessagePush(sequencer.WireMessage(m))
			if err != nil {
				return err
			}
			if err := s.QueueReply(ctx, frame); err != nil {
				return err
			}
		}
	}
	views, err := h.conversationViews(ctx, s.UserID())
	if err != nil {
		return err
	}
	s.Reply(protocol.ServerFrame{Type: protocol.TypeSynced, ID: f.ID, Conversations: views})
	return nil
}

// history answers one page with one bounded range query on {conversationId, seq}. Seqs are gapless
// (deleted messages stay as tombstones), so the range is computed from the anchor and the page
// size alone, at any depth.
func (h *Hub) history(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	ms, last, err := h.position(ctx, s.UserID(), f.ConversationID)
	if err != nil {
		return err
	}
	from, to := pageRange(f, last)
	// After deleting a conversation for themselves a user sees only what came later.
	from = max(from, ms.hiddenSeq+1)
	msgs, err := h.store.MessageRange(ctx, f.ConversationID, from, to)
	if err != nil {
		return err
	}
	page := make([]protocol.Message, len(msgs))
	for i, m := range msgs {
		page[i] = sequencer.WireMessage(m)
	}
	first := int64(0)
	if last > ms.hiddenSeq {
		first = ms.hiddenSeq + 1
	}
	s.Reply(protocol.ServerFrame{Type: protocol.TypePage, ID: f.ID, ConversationID: f.ConversationID,
		Messages: page, FirstSeq: first, LastSeq: last, HasBefore: first > 0 && from > first, HasAfter: to < last})
	return nil
}

// position returns a member's membership and the conversation's last seq: the store's counter or
// what this node has seen delivered, whichever is ahead.
func (h *Hub) position(ctx context.Context, userID, convID string) (membership, int64, error) {
	ms, err := h.membershipOf(userID, convID)
	if err != nil {
		return membership{}, 0, err
	}
	conv, err := h.store.Conversation(ctx, convID)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && !conv.IsMember(userID)) {
		return membership{}, 0, errNotMember // removed, and this node has not heard yet
	}
	if err != nil {
		return membership{}, 0, fmt.Errorf("load conversation %s: %w", convID, err)
	}
	return ms, max(conv.LastSeq, ms.lastSeq), nil
}

// pageRange turns a history request into the seq range [from, to] within [1, last].
func pageRange(f protocol.ClientFrame, last int64) (from, to int64) {
	n := int64(f.PageLimit())
	switch {
	case f.Before != nil:
		to = *f.Before - 1
		from = to - n + 1
	case f.After != nil:
		from = *f.After + 1
		to = from + n - 1
	case f.Around != nil || f.Fraction != nil:
		center := int64(0)
		if f.Around != nil {
			center = *f.Around
		} else {
			center = int64(math.Round(*f.Fraction * float64(last)))
		}
		from = center - n/2
		to = from + n - 1
	default:
		to = last
		from = last - n + 1
	}
	// Keep a full page when the anchor sits near an end.
	if f.Around != nil || f.Fraction != nil {
		if from < 1 {
			to += 1 - from
			from = 1
		}
		if to > last {
			from -= to - last
			to = last
		}
	}
	return max(from, 1), min(to, last)
}

// read moves the user's cursor forward (clamped to the conversation's last seq), tells the user's
// other devices and, where receipts are live, the other members. The store write is coalesced.
func (h *Hub) read(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	return h.Read(ctx, s.UserID(), f.ConversationID, f.Seq)
}

// Read is a read-cursor move by userID, from a session or from the HTTP API (a page that is
// closing sends its last read with a beacon, when its socket may be gone already).
func (h *Hub) Read(ctx context.Context, userID, convID string, seq int64) error {
	ms, err := h.membershipOf(userID, convID)
	hidden, live := h.hidesReceipts(userID), h.liveReceipts(convID)
	if err != nil {
		// The user has no session here: ask the store.
		conv, cerr := h.store.Conversation(ctx, convID)
		if errors.Is(cerr, storage.ErrNotFound) || (cerr == nil && !conv.IsMember(userID)) {
			return errNotMember
		}
		if cerr != nil {
			return cerr
		}
		user, uerr := h.store.User(ctx, userID)
		if uerr != nil {
			return fmt.Errorf("load user %s: %w", userID, uerr)
		}
		ms = membership{lastSeq: conv.LastSeq}
		hidden, live = user.HideReceipts, conv.Kind == storage.KindDM || len(conv.Members) <= h.cfg.LiveReceiptsMaxMembers
	}
	seq = min(seq, ms.lastSeq)
	if seq <= ms.readSeq {
		return nil
	}
	h.reads.Advance(storage.Cursor{UserID: userID, ConversationID: convID, ReadSeq: seq, Hidden: hidden, UpdatedAt: now()})
	h.applyCursor(userID, convID, seq)
	h.publishUserEvent(userID, userEvent{Type: userCursor, ConvID: convID, ReadSeq: seq})
	if !hidden && live {
		h.publishConversationEvent(convID, conversationEvent{Type: protocol.TypeReceipt, UserID: userID, ReadSeq: seq})
	}
	return nil
}

// liveReceipts reports whether cursor moves in a conversation are pushed to its members: DMs and
// small groups only.
func (h *Hub) liveReceipts(convID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.convs[convID]
	return ok && (c.kind == storage.KindDM || c.members <= h.cfg.LiveReceiptsMaxMembers)
}

// receipts answers "read by N" for one message, computed on demand from the cursors; small groups
// also get who.
func (h *Hub) receipts(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	if _, err := h.membershipOf(s.UserID(), f.ConversationID); err != nil {
		return err
	}
	msgs, err := h.store.MessageRange(ctx, f.ConversationID, f.Seq, f.Seq)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return protocol.Errorf(protocol.CodeNotFound, "no message %d in this conversation", f.Seq)
	}
	sender := msgs[0].SenderID
	if err := h.reads.Flush(ctx); err != nil {
		h.log.Warn().Err(err).Msg("flush read cursors before counting receipts")
	}
	n, err := h.store.CountReaders(ctx, f.ConversationID, f.Seq, sender)
	if err != nil {
		return err
	}
	reply := protocol.ServerFrame{Type: protocol.TypeReceiptCount, ID: f.ID, ConversationID: f.ConversationID, Seq: f.Seq, ReadBy: &n}
	if h.liveReceipts(f.ConversationID) {
		readers, err := h.store.Readers(ctx, f.ConversationID, f.Seq, sender, int64(h.cfg.LiveReceiptsMaxMembers))
		if err != nil {
			return err
		}
		for _, r := range readers {
			reply.Readers = append(reply.Readers, protocol.Reader{UserID: r.UserID, ReadSeq: r.ReadSeq})
		}
	}
	s.Reply(reply)
	return nil
}

func (h *Hub) typing(s *session.Session, f protocol.ClientFrame) error {
	if _, err := h.membershipOf(s.UserID(), f.ConversationID); err != nil {
		return err
	}
	h.publishConversationEvent(f.ConversationID, conversationEvent{Type: protocol.TypeTyping, UserID: s.UserID()})
	return nil
}

func (h *Hub) setPrivacy(ctx context.Context, s *session.Session, f protocol.ClientFrame) error {
	hide := *f.HideReceipts
	if err := h.store.SetHideReceipts(ctx, s.UserID(), hide); err != nil {
		return err
	}
	h.mu.Lock()
	if u, ok := h.users[s.UserID()]; ok {
		u.hideReceipts = hide
	}
	h.mu.Unlock()
	s.Reply(protocol.ServerFrame{Type: protocol.TypeOK, ID: f.ID})
	return nil
}

// Badge computes a user's total unread from the store, for users with no session here (push
// services): O(conversations), never a count over messages.
func (h *Hub) Badge(ctx context.Context, userID string) (int64, error) {
	convs, err := h.store.ConversationsOf(ctx, userID)
	if err != nil {
		return 0, err
	}
	cursors, err := h.store.CursorsOf(ctx, userID)
	if err != nil {
		return 0, err
	}
	read := make(map[string]int64, len(cursors))
	for _, c := range cursors {
		read[c.ConversationID] = c.ReadSeq
	}
	var total int64
	for _, c := range convs {
		total += max(0, c.LastSeq-read[c.ID])
	}
	return total, nil
}
